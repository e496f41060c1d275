#!/bin/bash
# gorge-webhook-probe: a container health check without curl.
#
#   gorge-webhook-probe [PATH]     PATH = /healthz (default) or /readyz
#
# Sends `GET PATH` to the daemon's own diagnostics listener over bash's
# /dev/tcp and exits 0 on HTTP 200, 1 otherwise (printing the status line
# and body, which for /readyz carries the reason). The port comes from
# GORGE_LISTEN_ADDR as the daemon reads it (default :8160); a wildcard or
# empty host is probed on 127.0.0.1.
set -u

path="${1:-/healthz}"
addr="${GORGE_LISTEN_ADDR:-:8160}"
port="${addr##*:}"
host="${addr%:*}"
host="${host#[}"
host="${host%]}"
case "$host" in
  "" | "0.0.0.0" | "::") host=127.0.0.1 ;;
esac

if ! { exec 3<>"/dev/tcp/${host}/${port}"; } 2>/dev/null; then
  echo "gorge-webhook-probe: nothing listens on ${host}:${port}" >&2
  exit 1
fi
printf 'GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' "$path" >&3
if ! IFS= read -r -t 5 status <&3; then
  echo "gorge-webhook-probe: no answer from ${host}:${port}${path}" >&2
  exit 1
fi
case "$status" in
  "HTTP/1."?" 200 "*) exit 0 ;;
esac
{
  printf '%s\n' "${status%$'\r'}"
  # The rest of the answer (headers, then the JSON body), bounded in time.
  while IFS= read -r -t 2 line || [ -n "${line:-}" ]; do
    printf '%s\n' "${line%$'\r'}"
    line=
  done
} <&3 >&2
exit 1
