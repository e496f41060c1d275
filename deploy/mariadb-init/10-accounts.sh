# shellcheck shell=bash
# Sourced once by the mariadb image's entrypoint when the data volume is
# first initialised (files in /docker-entrypoint-initdb.d that are not
# executable are sourced, so docker_process_sql is available).
#
# Two accounts:
#   - Phorge's, with every privilege on its own databases ({namespace}_*):
#     `bin/storage upgrade` creates them.
#   - the daemon's, with SELECT and UPDATE on {namespace}_herald only: it
#     never inserts, deletes or runs DDL. Granted on the database because
#     its tables do not exist yet; docs/operations.md shows the tighter
#     table-level grant for an installation that already has them. It may
#     also SELECT on the application databases of the objects Herald calls
#     webhooks about, to check each request's object as Phorge's worker
#     does (docs/operations.md, the object check; a test in
#     crates/store-mysql keeps this list equal to its OBJECT_TABLES).
#
# Passwords come from the container's environment (compose.yaml) and must
# not contain a single quote. No `set -u` here: this runs inside the
# entrypoint's own shell.
: "${PHORGE_DB_PASSWORD:?must be set}" "${WEBHOOK_DB_PASSWORD:?must be set}"

phorge_user="${PHORGE_DB_USER:-phorge}"
webhook_user="${WEBHOOK_DB_USER:-gorge_webhook}"
namespace="${PHORGE_NAMESPACE:-phorge}"
for value in "$PHORGE_DB_PASSWORD" "$WEBHOOK_DB_PASSWORD"; do
  case "$value" in
    *\'*) echo "10-accounts.sh: a password contains a single quote" >&2; exit 1 ;;
  esac
done
# In a GRANT, `_` is a wildcard; escape it so the names match exactly.
ns_pattern="${namespace//_/\\_}"

docker_process_sql <<SQL
CREATE USER IF NOT EXISTS '${phorge_user}'@'%' IDENTIFIED BY '${PHORGE_DB_PASSWORD}';
GRANT ALL PRIVILEGES ON \`${ns_pattern}\\_%\`.* TO '${phorge_user}'@'%';
CREATE USER IF NOT EXISTS '${webhook_user}'@'%' IDENTIFIED BY '${WEBHOOK_DB_PASSWORD}';
GRANT SELECT, UPDATE ON \`${ns_pattern}\\_herald\`.* TO '${webhook_user}'@'%';
SQL

object_applications="maniphest differential repository audit phriction pholio ponder project phame calendar paste file badges legalpad slowvote countdown owners dashboard"
for application in $object_applications; do
  docker_process_sql <<SQL
GRANT SELECT ON \`${ns_pattern}\\_${application}\`.* TO '${webhook_user}'@'%';
SQL
done
