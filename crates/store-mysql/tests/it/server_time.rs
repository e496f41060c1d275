//! The server's clock as the daemon reads it: one statement, to the
//! microsecond, naming an instant between the two local readings around
//! it. The server runs on this host, so it agrees with this host's clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::fixture::with_db;

fn host_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the host clock reads after 1970")
}

#[tokio::test]
async fn the_server_time_is_within_a_second_of_this_hosts_clock() {
    with_db(|db| async move {
        let reader = db.store().reader().clone();
        let mut readings = Vec::new();
        for _ in 0..3 {
            let whole_before = db.now().await;
            let host_before = host_now();
            let reading = reader.server_time().await.expect("the server's time");
            let host_after = host_now();
            let whole_after = db.now().await;
            assert!(reading.sent <= reading.answered, "{reading:?}");
            assert!(
                reading.server + Duration::from_secs(1) >= host_before
                    && reading.server <= host_after + Duration::from_secs(1),
                "server {:?}, host {host_before:?} to {host_after:?}",
                reading.server
            );
            // Its whole seconds are the server's UNIX_TIMESTAMP() of that
            // moment, as a claim writes it.
            assert!(
                (whole_before..=whole_after).contains(&reading.server.as_secs()),
                "{:?} not within {whole_before}..={whole_after}",
                reading.server
            );
            readings.push(reading.server);
        }
        // Sub-second precision: three readings all on a whole second would
        // mean the microseconds are lost.
        assert!(
            readings.iter().any(|server| server.subsec_nanos() != 0),
            "{readings:?}"
        );
        assert!(
            readings.windows(2).all(|pair| pair[0] <= pair[1]),
            "{readings:?}"
        );
    })
    .await;
}
