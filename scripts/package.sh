#!/usr/bin/env bash
# Builds the Debian package of stealscope with cargo-deb (metadata in
# crates/cli/Cargo.toml) and prints the path of the .deb as its last line.
# Man pages (one per command and subcommand) and shell completions are
# generated here from the CLI definition, by the release binary itself, so
# they cannot drift from it. Installs cargo-deb when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo deb --version >/dev/null 2>&1; then
  echo "== installing cargo-deb" >&2
  # The version the metadata and test-package.sh were written against.
  cargo install cargo-deb --locked --quiet --version '^3.8' >&2
fi

bin=target/release/stealscope
if [[ ${1:-} == --from-debug ]]; then
  # CI (scripts/test.sh): the package's files, scripts, units, man pages and
  # serve answering are what is tested there, not the optimizer, so the
  # binary the test build already made is packaged (without its line tables,
  # which a release build does not have) instead of a second build of the
  # whole tree.
  echo "== the test build's binary, stripped (--from-debug)" >&2
  mkdir -p target/release
  objcopy --strip-debug target/debug/stealscope "$bin"
else
  echo "== release build" >&2
  cargo build --release --locked -p stealscope --bin stealscope >&2
fi

echo "== man pages and completions" >&2
gen=target/release/package
rm -rf "$gen"
mkdir -p "$gen/man" "$gen/completions"
"$bin" man --dir "$gen/man"
# Debian policy: man pages compressed with gzip -9, without a timestamp.
gzip -9n "$gen"/man/*.1
"$bin" completions bash >"$gen/completions/stealscope.bash"
"$bin" completions zsh >"$gen/completions/_stealscope"
"$bin" completions fish >"$gen/completions/stealscope.fish"

# Debian wants a changelog; ours has one entry for the version being built
# (the project's history is git's), dated by that commit for a
# reproducible package.
version=$("$bin" --version | awk '{print $2}')
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
date=$(git log -1 --format=%aD 2>/dev/null || date -R)
maintainer=$(sed -n 's/^maintainer = "\(.*\)"$/\1/p' crates/cli/Cargo.toml)
cat >"$gen/changelog" <<EOC
stealscope ($version-1) unstable; urgency=medium

  * Built from commit $commit of the stealscope workspace.

 -- $maintainer  $date
EOC

echo "== cargo deb" >&2
# --no-build: the binary above (with its commit in --version) is packaged.
deb=$(cargo deb -p stealscope --no-build --locked --output target/debian 2>&2 | tail -n 1)
[ -f "$deb" ] || { echo "package.sh: cargo deb did not report a .deb ($deb)" >&2; exit 1; }
# Not left where a release build's binary belongs: cargo could take the
# newer file for its own output and never build the release one.
[[ ${1:-} == --from-debug ]] && rm -f "$bin"
realpath "$deb"
