#!/usr/bin/env bash
# Put the tests/ folder of timm's sdist (version VERSION, from the package index) into DIR/VERSION/: timm's
# own model tests, which its wheel does not ship. Does nothing when DIR/VERSION/test_models.py exists.
#
#   bash tools/fetch_timm_tests.sh DIR VERSION
set -euo pipefail
DIR=$1
VERSION=$2
[ -f "$DIR/$VERSION/test_models.py" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pip download -q --disable-pip-version-check --no-deps --no-binary :all: "timm==$VERSION" -d "$tmp"
tar -xzf "$tmp/timm-$VERSION.tar.gz" -C "$tmp" "timm-$VERSION/tests"
mkdir -p "$DIR"
rm -rf "$DIR/$VERSION.partial"
mv "$tmp/timm-$VERSION/tests" "$DIR/$VERSION.partial"
mv "$DIR/$VERSION.partial" "$DIR/$VERSION"
echo "[timm-tests] timm $VERSION's tests in $DIR/$VERSION"
