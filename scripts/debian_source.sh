# debian_source.sh — sourced by the scripts that build a library from Debian's own sources
# (scripts/msan_deps.sh, scripts/wasm_deps.sh): the upstream tarball of the version Debian 12 ships
# and Debian's patches, fetched from its archive and checked by SHA-256. The caller sets $work
# (where the files and the unpacked trees go) and $prefix (where the libraries are installed)
# before calling them.

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

# build_cjson_utf8proc CC AR FLAGS...: cJSON and utf8proc (one source file each, fetched into $work
# as cJSON-1.7.15 and utf8proc-2.8.0) as static libraries and headers under $prefix
build_cjson_utf8proc() {
  local cc=$1 ar=$2
  shift 2
  "$cc" "$@" -c "$work/cJSON-1.7.15/cJSON.c" -o "$work/cJSON.o"
  "$ar" rcs "$prefix/lib/libcjson.a" "$work/cJSON.o"
  cp "$work/cJSON-1.7.15/cJSON.h" "$prefix/include/cjson/"
  "$cc" "$@" -DUTF8PROC_STATIC -c "$work/utf8proc-2.8.0/utf8proc.c" -o "$work/utf8proc.o"
  "$ar" rcs "$prefix/lib/libutf8proc.a" "$work/utf8proc.o"
  cp "$work/utf8proc-2.8.0/utf8proc.h" "$prefix/include/"
}
