#!/bin/sh
# Installs gorge-webhook from an unpacked release tarball (made by
# `cargo xtask dist`), on a Debian or Ubuntu host with systemd:
#
#   tar xzf gorge-webhook-VERSION-ARCH-linux.tar.gz
#   sudo gorge-webhook-VERSION-ARCH-linux/install.sh
#
# It puts in place, as the systemd unit expects them:
#   /usr/local/bin/webhook-daemon, /usr/local/bin/webhook-admin
#   /etc/systemd/system/gorge-webhook.service
#   /etc/gorge-webhook/env            the settings (root only, mode 0600);
#                                     an existing file is never replaced
#   /usr/local/share/gorge-webhook/   the database account script
#   /usr/local/share/man/man1/        the manual pages
#   /usr/local/share/{bash-completion/completions,zsh/site-functions,
#     fish/vendor_completions.d}/     shell completions
#   /usr/local/share/doc/gorge-webhook/  licences
# and reloads systemd when it runs. It neither enables nor starts the
# service: the settings come first (see what it prints at the end).
# Running it again upgrades the binaries, unit and pages in place.
#
# DESTDIR=/some/root installs under that directory instead of /.
set -eu

here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
root="${DESTDIR:-}"

if [ "$(id -u)" != 0 ] && [ -z "$root" ]; then
  echo "install.sh: run it as root (sudo), or set DESTDIR" >&2
  exit 1
fi

install -d -m 0755 "$root/usr/local/bin" "$root/etc/systemd/system" \
  "$root/usr/local/share/gorge-webhook" "$root/usr/local/share/man/man1" \
  "$root/usr/local/share/bash-completion/completions" \
  "$root/usr/local/share/zsh/site-functions" \
  "$root/usr/local/share/fish/vendor_completions.d" \
  "$root/usr/local/share/doc/gorge-webhook"
install -m 0755 "$here/bin/webhook-daemon" "$here/bin/webhook-admin" "$root/usr/local/bin/"
install -m 0644 "$here/gorge-webhook.service" "$root/etc/systemd/system/gorge-webhook.service"
install -m 0644 "$here/10-accounts.sh" "$root/usr/local/share/gorge-webhook/10-accounts.sh"
install -m 0644 "$here/gorge-webhook.env.example" "$root/usr/local/share/gorge-webhook/env.example"
install -m 0644 "$here"/man/*.1 "$root/usr/local/share/man/man1/"
install -m 0644 "$here"/doc/* "$root/usr/local/share/doc/gorge-webhook/"
for tool in webhook-daemon webhook-admin; do
  install -m 0644 "$here/completions/$tool.bash" \
    "$root/usr/local/share/bash-completion/completions/$tool"
  install -m 0644 "$here/completions/_$tool" "$root/usr/local/share/zsh/site-functions/_$tool"
  install -m 0644 "$here/completions/$tool.fish" \
    "$root/usr/local/share/fish/vendor_completions.d/$tool.fish"
done

# The settings hold the database password and the service token: root
# only, and never overwritten.
install -d -m 0700 "$root/etc/gorge-webhook"
if [ -e "$root/etc/gorge-webhook/env" ]; then
  kept="kept"
else
  install -m 0600 "$here/gorge-webhook.env.example" "$root/etc/gorge-webhook/env"
  kept="new"
fi

if [ -z "$root" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
fi

cat <<EOF
installed gorge-webhook $("$here/bin/webhook-daemon" --version | cut -d' ' -f2)
  binaries   /usr/local/bin/webhook-daemon, /usr/local/bin/webhook-admin
  unit       /etc/systemd/system/gorge-webhook.service (not enabled)
  settings   /etc/gorge-webhook/env ($kept)
next:
  1. the database account:  WEBHOOK_DB_PASSWORD=... bash /usr/local/share/gorge-webhook/10-accounts.sh | mariadb
  2. edit /etc/gorge-webhook/env, then:  set -a; . /etc/gorge-webhook/env; set +a; webhook-admin doctor
  3. systemctl enable --now gorge-webhook
EOF
