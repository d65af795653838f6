#!/bin/sh
# tools/deb/build.sh — the Debian package of ketch, from a tree `make` has
# built (`make deb` runs it): `make install PREFIX=/usr` into a staging root,
# the systemd units, /etc/default files, the ketch user (postinst), strip,
# Depends from dpkg-shlibdeps, then dpkg-deb. Output:
# $O/ketch_$VERSION_<arch>.deb. No debhelper: dpkg-dev's tools only.
set -e
O=${O:-build}
VERSION=${VERSION:?}
MAKE=${MAKE:-make}
ARCH=$(dpkg --print-architecture)
top=$(pwd)
work=$(cd "$O" && pwd)/deb
root=$work/root
rm -rf "$work"
mkdir -p "$root/DEBIAN"
$MAKE -s install DESTDIR="$root" PREFIX=/usr O="$O" >/dev/null

# units, sysusers, defaults (the example of a 3-machine member, commented out:
# as installed, the member runs alone on 127.0.0.1)
install -d "$root/lib/systemd/system" "$root/usr/lib/sysusers.d" "$root/etc/default"
install -m 0644 contrib/systemd/ketch.service contrib/systemd/ketch-grpc.service \
  "$root/lib/systemd/system/"
install -m 0644 contrib/systemd/ketch.sysusers "$root/usr/lib/sysusers.d/ketch.conf"
{
  echo "# Uncomment and edit to make this member part of a cluster (see ketch --help)."
  sed 's/^KETCH_/#KETCH_/' contrib/systemd/ketch.env
} > "$root/etc/default/ketch"
{
  echo "# KETCH_GRPC_OPTS: ketch-grpc's flags (see ketch-grpc --help)."
  echo 'KETCH_GRPC_OPTS="--listen-addr 127.0.0.1:2379 --endpoints 127.0.0.1:2479"'
} > "$root/etc/default/ketch-grpc"
chmod 0644 "$root/etc/default/ketch" "$root/etc/default/ketch-grpc"

# Debian's documentation rules: compressed man pages and changelog, a copyright file
doc=$root/usr/share/doc/ketch
gzip -9n "$root"/usr/share/man/man1/*.1 "$root"/usr/share/man/man3/*.3
date=$(date -u -R ${SOURCE_DATE_EPOCH:+-d @$SOURCE_DATE_EPOCH})
printf 'ketch (%s) unstable; urgency=medium\n\n  * Built from the ketch source tree.\n\n -- ketch maintainers <ketch@example.org>  %s\n' \
  "$VERSION" "$date" | gzip -9n > "$doc/changelog.gz"
cat > "$doc/copyright" <<EOT
ketch, a replicated strongly consistent key-value store (etcd's data model
and API) in C.

Copyright (C) 2026 the ketch authors.

The project has not stated a license yet; until it does, this package may be
used where it was built and must not be redistributed.
EOT

# strip (the debugging symbols stay in the build tree)
for f in "$root"/usr/bin/*; do strip --remove-section=.comment --remove-section=.note "$f"; done
strip --remove-section=.comment --remove-section=.note --strip-unneeded \
  "$root/usr/lib/libketch.so.$VERSION"
strip --strip-debug "$root/usr/lib/libketch.a"

# Depends: what the binaries link (dpkg-shlibdeps wants a debian/control)
mkdir -p "$work/src/debian"
printf 'Source: ketch\n\nPackage: ketch\nArchitecture: any\n' > "$work/src/debian/control"
deps=$(cd "$work/src" && dpkg-shlibdeps -O -S"$root" -l"$root/usr/lib" \
  "$root"/usr/bin/* "$root/usr/lib/libketch.so.$VERSION" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<EOT
Package: ketch
Version: $VERSION
Architecture: $ARCH
Maintainer: ketch maintainers <ketch@example.org>
Installed-Size: $size
Depends: $deps, adduser
Section: database
Priority: optional
Description: replicated strongly consistent key-value store (etcd's API)
 ketch is a key-value store with etcd's data model and API semantics (MVCC
 revisions, range/put/delete/txn, watch, lease, lock, election, membership,
 snapshots) built as one single-threaded event loop per member.
 .
 This package holds the member (ketch, run by ketch.service), ketchctl,
 ketchutl, the etcd gRPC bridge ketch-grpc (ketch-grpc.service),
 ketch-bench, ketch-operator, and the C client library libketch with its
 header and pkg-config file.
EOT
printf '/etc/default/ketch\n/etc/default/ketch-grpc\n' > "$root/DEBIAN/conffiles"
printf 'libketch 0 ketch (>= %s)\n' "$VERSION" > "$root/DEBIAN/shlibs"
printf 'activate-noawait ldconfig\n' > "$root/DEBIAN/triggers"
cat > "$root/DEBIAN/postinst" <<'EOT'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  if ! getent passwd ketch >/dev/null; then
    adduser --system --group --quiet --home /var/lib/ketch --no-create-home ketch
  fi
  install -d -o ketch -g ketch -m 0700 /var/lib/ketch
fi
if [ -d /run/systemd/system ]; then
  systemctl --system daemon-reload >/dev/null || true
fi
EOT
cat > "$root/DEBIAN/postrm" <<'EOT'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
  systemctl --system daemon-reload >/dev/null || true
fi
EOT
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/postrm"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -print | sed 's|^\./||' | sort |
  xargs md5sum > DEBIAN/md5sums)
chmod 0644 "$root/DEBIAN/md5sums" "$root/DEBIAN/control" "$root/DEBIAN/conffiles" \
  "$root/DEBIAN/shlibs" "$root/DEBIAN/triggers"
out="$top/$O/ketch_${VERSION}_$ARCH.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$out" >/dev/null
echo "$out"
