# debian_source.sh — sourced by the scripts that build a library from Debian's own sources
# (scripts/msan_deps.sh, scripts/wasm_deps.sh): the upstream tarball of the version Debian 12 ships
# and Debian's patches, fetched from its archive and checked by SHA-256. The caller sets $work
# (where the files and the unpacked trees go) before calling them.

debian_pool=http://deb.debian.org/debian/pool/main
debian_security=http://deb.debian.org/debian-security/pool/updates/main

# download URL SHA256: the file in $work, checked; its path on stdout
download() {
  local file
  file=$work/$(basename "$1")
  if [ ! -f "$file" ]; then curl -fsSL --retry 3 -o "$file.part" "$1" && mv "$file.part" "$file"; fi
  echo "$2  $file" | sha256sum -c --quiet - >&2 || { rm -f "$file"; echo "$(basename "$0"): $1: checksum mismatch" >&2; exit 1; }
  echo "$file"
}

# fetch DIR ORIG SHA256 [DEBIAN SHA256]: the upstream tarball unpacked into $work/DIR (afresh), with
# Debian's patches (its debian.tar.xz) applied in the order of its debian/patches/series
fetch() {
  local orig deb patch
  orig=$(download "$2" "$3")
  rm -rf "${work:?}/$1"
  tar xzf "$orig" -C "$work"
  [ $# -ge 5 ] || return 0
  deb=$(download "$4" "$5")
  tar xJf "$deb" -C "$work/$1"
  if [ -f "$work/$1/debian/patches/series" ]; then
    while read -r patch _; do
      case $patch in ''|'#'*) continue;; esac
      patch -s -p1 -d "$work/$1" < "$work/$1/debian/patches/$patch"
    done < "$work/$1/debian/patches/series"
  fi
}
