#!/bin/sh
# fetch.sh reproduces the Swagger UI files of this directory, which docs.go
# embeds in the binary: it packs the pinned version of npm's
# swagger-ui-dist, checks the tarball against the pinned integrity (the
# registry's "dist.integrity"), and keeps only what the page at /docs needs,
# gzipped (-n: no name or time stamp, so the same input gives the same
# bytes). The source maps, the other bundles and the upstream index.html
# are left out. To move to another version, change VERSION and INTEGRITY
# (npm view swagger-ui-dist@VERSION dist.integrity), run this, and run
# go test -run 'Docs|Browser' with PETSTORE_TEST_BROWSER set.
#
# Needs npm (and so node), tar and gzip; run from anywhere.
set -eu

VERSION=5.35.0
INTEGRITY=sha512-U06rpMtW9V3XPGOBeamTUSr0Z09jMX4IJuANpE/EZbAhw0G8CgwrzU4YmXkn/h0wCDNsXdGarTNNHC3sU8yVUQ==

dir=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

npm pack --silent "swagger-ui-dist@$VERSION" >/dev/null
tgz=swagger-ui-dist-$VERSION.tgz
got=$(node -e '
const data = require("fs").readFileSync(process.argv[1]);
process.stdout.write("sha512-" + require("crypto").createHash("sha512").update(data).digest("base64"));
' "$tgz")
if [ "$got" != "$INTEGRITY" ]; then
	echo "fetch.sh: $tgz has integrity $got, want $INTEGRITY" >&2
	exit 1
fi
tar -xzf "$tgz"

# The page loads these two; the stylesheet's last line names a source map
# that is not shipped, so it goes (a browser with its tools open would ask
# for it and get a 404).
gzip -9 -n -c package/swagger-ui-bundle.js >"$dir/swagger-ui-bundle.js.gz"
grep -v '^/\*# sourceMappingURL=' package/swagger-ui.css | gzip -9 -n -c >"$dir/swagger-ui.css.gz"
# Apache-2.0 asks for the licence and the NOTICE to travel with the code;
# the bundle's first line points at its third-party notices.
cp package/LICENSE package/NOTICE package/swagger-ui-bundle.js.LICENSE.txt "$dir/"
echo "fetch.sh: swagger-ui-dist $VERSION written to $dir"
