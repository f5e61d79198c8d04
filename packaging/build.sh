#!/bin/sh
# Builds goodput's packages from the workspace root:
#
#   packaging/build.sh            # the .deb and the .rpm
#
# Needs cargo-deb and cargo-generate-rpm (`cargo install cargo-deb
# cargo-generate-rpm`). The release binary is built stripped: the
# workspace's release profile keeps line tables (debug = 1) for
# backtraces, 176 MB; the packages ship the 29 MB binary.
set -eu
cd "$(dirname "$0")/.."
CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release -p goodput --locked
ls -l target/release/goodput
packaging/assets.sh target/release/goodput target/packaging
cargo deb -p goodput --no-build
cargo generate-rpm -p crates/goodput
ls -l target/debian/*.deb target/generate-rpm/*.rpm
