# shellcheck shell=bash
# The daemon's database account and its grants: exactly what delivery and
# `webhook-admin doctor` use, and no more. One script for both ways in:
#
#   * Compose: the mariadb image's entrypoint sources it once, when the
#     data volume is first initialised (non-executable files in
#     /docker-entrypoint-initdb.d are sourced, so docker_process_sql is
#     there). It then also creates Phorge's own account, because
#     PHORGE_DB_PASSWORD is set.
#   * An existing server: run it with bash and pipe what it prints into
#     the server as an administrator:
#
#       WEBHOOK_DB_PASSWORD=… PHORGE_NAMESPACE=phorge \
#         bash deploy/mariadb-init/10-accounts.sh | sudo mariadb
#
# Settings (environment):
#   WEBHOOK_DB_PASSWORD  required: the daemon's password
#   WEBHOOK_DB_USER      the daemon's account (gorge_webhook)
#   WEBHOOK_DB_HOST      where it connects from ('%': anywhere)
#   PHORGE_NAMESPACE     Phorge's storage namespace (phorge)
#   ADOPT_PHP_TASKS      `true` for upstream Phorge without the hand-off
#                        (GORGE_WEBHOOK_ADOPT_PHP_TASKS=true): adds the
#                        task-queue writes adoption needs. Those grants
#                        name tables, so Phorge's storage must exist.
#   HISTORY              `true` with the attempt history on
#                        (GORGE_WEBHOOK_HISTORY=true): CREATE, SELECT,
#                        INSERT and DELETE on its own database,
#   HISTORY_DATABASE     {namespace}_webhook_history unless named (as
#                        GORGE_WEBHOOK_HISTORY_DATABASE names it)
#   PHORGE_DB_PASSWORD   when set, also creates Phorge's account
#   PHORGE_DB_USER       (phorge) with every privilege on {namespace}_*,
#                        as a fresh Compose deployment needs
#
# What the daemon's account gets, all database-level (they hold before
# Phorge's `bin/storage upgrade` creates the tables):
#   {namespace}_herald   SELECT, UPDATE: the queue and the hooks. It never
#                        inserts, deletes or runs DDL.
#   {namespace}_config   SELECT: Phorge's global silent mode (config_entry)
#   {namespace}_worker   SELECT: PHP delivery tasks still queued, and who
#                        ran the recent ones (doctor's checks)
#   {namespace}_webhook_history (HISTORY=true): CREATE, SELECT, INSERT,
#                        DELETE: the daemon's own attempt history, which
#                        it creates, writes and prunes
#   the applications' databases whose objects Herald calls webhooks
#   about: SELECT, to check each request's object before its call as
#   Phorge's worker does (a test in crates/store-mysql keeps this list
#   equal to the object check's tables).
# A test in webhook-admin runs this script against MariaDB and then
# `doctor` as the account it made: every check of a privilege passes.
#
# Values must not contain a single quote or a backslash (MariaDB reads it
# as an escape). No `set -u`: when sourced, this runs inside the
# entrypoint's own shell.
: "${WEBHOOK_DB_PASSWORD:?must be set}"

webhook_user="${WEBHOOK_DB_USER:-gorge_webhook}"
webhook_host="${WEBHOOK_DB_HOST:-%}"
namespace="${PHORGE_NAMESPACE:-phorge}"
phorge_user="${PHORGE_DB_USER:-phorge}"
for value in "$WEBHOOK_DB_PASSWORD" "${PHORGE_DB_PASSWORD:-}" "$webhook_user" "$webhook_host" "$phorge_user"; do
  case "$value" in
    *\'*|*\\*) echo "10-accounts.sh: a value contains a single quote or a backslash" >&2; exit 1 ;;
  esac
done
case "$namespace" in
  *[!A-Za-z0-9_]*|'') echo "10-accounts.sh: PHORGE_NAMESPACE must be letters, digits and _" >&2; exit 1 ;;
esac
history_database="${HISTORY_DATABASE:-${namespace}_webhook_history}"
case "$history_database" in
  *[!A-Za-z0-9_]*|'') echo "10-accounts.sh: HISTORY_DATABASE must be letters, digits and _" >&2; exit 1 ;;
esac

# Outside the image's entrypoint there is no server session to feed:
# print the statements instead.
if ! command -v docker_process_sql >/dev/null 2>&1; then
  docker_process_sql() { cat; }
fi

# In a database-level GRANT, `_` is a wildcard; escape it so the names
# match exactly.
ns_pattern="${namespace//_/\\_}"
account="'${webhook_user}'@'${webhook_host}'"

if [ -n "${PHORGE_DB_PASSWORD:-}" ]; then
  docker_process_sql <<SQL
CREATE USER IF NOT EXISTS '${phorge_user}'@'%' IDENTIFIED BY '${PHORGE_DB_PASSWORD}';
GRANT ALL PRIVILEGES ON \`${ns_pattern}\\_%\`.* TO '${phorge_user}'@'%';
SQL
fi

docker_process_sql <<SQL
CREATE USER IF NOT EXISTS ${account} IDENTIFIED BY '${WEBHOOK_DB_PASSWORD}';
GRANT SELECT, UPDATE ON \`${ns_pattern}\\_herald\`.* TO ${account};
GRANT SELECT ON \`${ns_pattern}\\_config\`.* TO ${account};
GRANT SELECT ON \`${ns_pattern}\\_worker\`.* TO ${account};
SQL

object_applications="maniphest differential repository audit phriction pholio ponder project phame calendar paste file badges legalpad slowvote countdown owners dashboard"
for application in $object_applications; do
  docker_process_sql <<SQL
GRANT SELECT ON \`${ns_pattern}\\_${application}\`.* TO ${account};
SQL
done

if [ "${HISTORY:-false}" = true ]; then
  docker_process_sql <<SQL
GRANT CREATE, SELECT, INSERT, DELETE ON \`${history_database//_/\\_}\`.* TO ${account};
SQL
fi

if [ "${ADOPT_PHP_TASKS:-false}" = true ]; then
  docker_process_sql <<SQL
GRANT UPDATE, DELETE ON \`${namespace}_worker\`.\`worker_activetask\` TO ${account};
GRANT INSERT ON \`${namespace}_worker\`.\`worker_archivetask\` TO ${account};
SQL
fi
