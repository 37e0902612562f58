#!/usr/bin/env bash
# Assembles the demo's text corpus from text every Debian system has, into OUT_FILE:
#   1. the license texts in /usr/share/common-licenses (regular files; the GPL -> GPL-3 style
#      links would only repeat them),
#   2. /usr/share/doc/<package>/copyright of every Essential package,
#   3. the Perl modules of perl-base (Essential), whose POD is mostly English prose.
# Each list is sorted (C locale) and repeated contents are kept once, so the corpus is the same
# on every run of one system; the last line printed gives its size and sha256. Idempotent: when
# OUT_FILE already holds exactly these bytes it is left untouched.
#
#   scripts/make-demo-corpus.sh data/demo_corpus.txt
set -euo pipefail
export LC_ALL=C

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUT_FILE" >&2
  exit 2
fi
out=$1
max_bytes=$((3 * 1024 * 1024))  # the demo needs 1-3 MB; a bigger system is cut here
min_bytes=$((256 * 1024))

sources() {
  find /usr/share/common-licenses -maxdepth 1 -type f | sort
  dpkg-query -W -f='${Package} ${Essential}\n' | awk '$2 == "yes" { print $1 }' | sort |
    while read -r pkg; do
      f=/usr/share/doc/$pkg/copyright
      if [[ -f $f ]]; then echo "$f"; fi
    done
  dpkg -L perl-base | grep '\.pm$' | sort
}

mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.tmp.XXXXXX")
trap 'rm -f "$tmp"' EXIT

files=0
declare -A seen=()
while read -r f; do
  [[ -r $f ]] || continue
  sum=$(sha256sum < "$f" | cut -d' ' -f1)
  [[ -z ${seen[$sum]+x} ]] || continue
  seen[$sum]=1
  cat "$f" >> "$tmp"
  printf '\n' >> "$tmp"
  files=$((files + 1))
done < <(sources)

size=$(stat -c %s "$tmp")
if ((size > max_bytes)); then
  truncate -s "$max_bytes" "$tmp"
  size=$max_bytes
fi
if ((size < min_bytes)); then
  echo "make-demo-corpus: only $size bytes of text found in $files files (need $min_bytes);" \
    "is /usr/share/doc excluded on this system?" >&2
  exit 1
fi
sum=$(sha256sum < "$tmp" | cut -d' ' -f1)

if [[ -f $out ]] && [[ $(stat -c %s "$out") -eq $size ]] &&
  [[ $(sha256sum < "$out" | cut -d' ' -f1) == "$sum" ]]; then
  status="up to date"
else
  chmod 644 "$tmp"
  mv -f "$tmp" "$out"
  status="written"
fi
echo "make-demo-corpus: $out $status: $files files, $size bytes, sha256 $sum"
