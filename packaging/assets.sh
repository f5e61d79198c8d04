#!/bin/sh
# The files the packages install beside the binary, made by the binary
# itself (so they match its flags): a man page for goodput and one for
# each command (goodput-tcp(1), goodput-agent(1), …), gzipped as Debian
# and Fedora install them, and the shell completions.
#
#   packaging/assets.sh GOODPUT OUTDIR
#
# writes OUTDIR/man/*.1.gz and OUTDIR/completions/{goodput.bash,_goodput,goodput.fish}.
set -eu
bin=$1
out=$2
rm -rf "$out/man" "$out/completions"
mkdir -p "$out/man" "$out/completions"
"$bin" man > "$out/man/goodput.1"
# The commands as `goodput --help` lists them (help is clap's own).
for cmd in $("$bin" --help | sed -n '/^Commands:/,/^Options:/s/^  \([a-z0-9-]*\)  .*/\1/p'); do
    [ "$cmd" = help ] && continue
    "$bin" man "$cmd" > "$out/man/goodput-$cmd.1"
done
gzip -9n "$out"/man/*.1
"$bin" completions bash > "$out/completions/goodput.bash"
"$bin" completions zsh > "$out/completions/_goodput"
"$bin" completions fish > "$out/completions/goodput.fish"
