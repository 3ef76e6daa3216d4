#!/usr/bin/env python3
# Usage: python3 tools/long_functions.py src/rust/engine/src [80]   (exit status 1 when one is found)
# Functions longer than N lines (default 80) in Rust files: from the `fn` line to its closing brace
# at the same indentation; #[cfg(test)] modules skipped.
import re,sys,glob,os
root=sys.argv[1]; limit=int(sys.argv[2]) if len(sys.argv)>2 else 80
found=0
for f in sorted(glob.glob(os.path.join(root,'**/*.rs'),recursive=True)):
    lines=open(f).read().split('\n')
    test_from=next((i for i,l in enumerate(lines) if l.startswith('#[cfg(test)]') and i+1<len(lines) and 'mod tests' in lines[i+1]),len(lines))
    for i,l in enumerate(lines[:test_from]):
        m=re.match(r'^(\s*)(pub(\([a-z]+\))? )?(unsafe )?fn (\w+)',l)
        if m and l.rstrip().endswith(";"): continue
        if not m: continue
        ind=m.group(1)
        for j in range(i,test_from):
            if lines[j]==ind+'}' or (j>i and lines[j].startswith(ind+'}')):
                break
        n=j-i+1
        if n>limit:
            print(f'{n:4d} {f}:{i+1} {m.group(5)}')
            found+=1
sys.exit(1 if found else 0)
