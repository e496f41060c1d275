//! The pipeline's first stage, steps 1–5 for a row of the run's own: the
//! silent-mode hold (or, with adopted tasks, silent mode's hook error,
//! which Phorge's worker checks first), [`triage`](crate::triage()) with
//! the row's hook as Phorge has it now (the hook cache), then the hook's
//! URI checked through the transport. A candidate row becomes
//! [`Prepared`], or an [`Exit`]: the hook error to write, or nothing while
//! delivery is held or the hook cannot be read.

use crate::model::RequestRow;
use crate::outcome::HookError;
use crate::properties::Properties;
use crate::triage::{triage, Triage};

use super::context::Context;
use super::stages::{Exit, Prepared};

/// Steps 1–5 for `row`.
pub(super) async fn prepare<'r>(cx: &Context, row: &'r RequestRow) -> Result<Prepared<'r>, Exit> {
    if cx.hold_now().await {
        return Err(Exit::Stop);
    }
    if cx.fail_when_silent && row.defect.is_none() && cx.silent_now().await {
        if let Ok(properties) = Properties::parse(&row.properties) {
            return Err(Exit::HookError {
                properties,
                error: HookError::Silent,
                claim: None,
            });
        }
    }
    let (properties, hook) = match triage(row, || cx.hook(row)).await {
        Triage::Ready { properties, hook } => (properties, hook),
        failed => return Err(cx.triage_exit(row, failed, None)),
    };
    let target = cx.resolve(row, &properties, &hook, None).await?;
    Ok(Prepared {
        row,
        properties,
        hook,
        target,
    })
}
