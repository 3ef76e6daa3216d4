#!/bin/sh
# Two installed revisions of rkeops alternated in one call (issue 53's "old and new within 3 %"):
# bench/old_new.R with OLD, NEW, OLD, NEW. Each line: revision | case | median ms | runs | value.
# Usage: bench/old_new.sh OLD_LIBRARY NEW_LIBRARY [OUTPUT]   (BACKEND, REPS: see bench/old_new.R)
old=$1; new=$2; out=${3:-/dev/stdout}
for pass in 1 2; do
  R_LIBS=$old LABEL=old Rscript bench/old_new.R >> "$out" 2>&1
  R_LIBS=$new LABEL=new Rscript bench/old_new.R >> "$out" 2>&1
done
