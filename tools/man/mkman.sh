#!/bin/sh
# tools/man/mkman.sh BINARY NAME SECTION — a man page made
# from the program's own --help (so the page never disagrees with the
# program), with a header, NAME and the help text verbatim. Used by
# `make man`, `make install` and `make deb`.
set -e
bin=$1 name=$2 sec=$3
case $name in
ketch) summary="the ketch key-value store member" ;;
ketchctl) summary="command line client for ketch" ;;
ketchutl) summary="offline tool for ketch data directories and snapshots" ;;
ketch-grpc) summary="etcd v3 gRPC API bridge in front of a ketch cluster" ;;
ketch-bench) summary="benchmark harness for ketch and etcd" ;;
ketch-operator) summary="keeps a ketch cluster at its declared size" ;;
*) summary="part of ketch" ;;
esac
date=$(date -u ${SOURCE_DATE_EPOCH:+-d @$SOURCE_DATE_EPOCH} +%Y-%m-%d)
printf '.TH %s %s "%s" "ketch %s" "ketch manual"\n' "$(echo "$name" | tr a-z A-Z)" "$sec" "$date" "${VERSION:-}"
printf '.SH NAME\n%s \\- %s\n' "$name" "$summary"
printf '.SH DESCRIPTION\n.nf\n'
# the help text, verbatim: backslashes doubled, lines starting with . or ' guarded
"$bin" --help 2>&1 | sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
printf '.fi\n.SH SEE ALSO\n'
printf 'ketch(1), ketchctl(1), ketchutl(1), ketch-grpc(1), ketch-bench(1), libketch(3); the README in /usr/share/doc/ketch.\n'
