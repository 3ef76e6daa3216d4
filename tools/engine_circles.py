#!/usr/bin/env python3
# Usage: python3 tools/engine_circles.py src/rust/engine/src [--top]   (exit status 1 when there is a circle)
# Import circles among the engine's modules (files): edges from `crate::a::b` and `super::x` paths
# outside #[cfg(test)] blocks; prints each strongly connected component of more than one file.
import re,glob,collections,sys,os
os.chdir([a for a in sys.argv[1:] if not a.startswith('--')][0])
files=glob.glob('**/*.rs',recursive=True)
def modname(f):
    m=f[:-3]
    if m.endswith('/mod'): m=m[:-4]
    return 'crate' if m=='lib' else m.replace('/','::')
mods={modname(f):f for f in files}
def resolve(path):
    for k in range(len(path),0,-1):
        cand='::'.join(path[:k])
        if cand in mods: return cand
deps=collections.defaultdict(set)
for f in files:
    s=open(f).read()
    s=re.sub(r'#\[cfg\(test\)\]\s*mod tests \{.*','',s,flags=re.S)
    s=re.sub(r'//.*','',s)
    me=modname(f)
    is_dir_mod=f.endswith('mod.rs')
    parent=me.rsplit('::',1)[0] if '::' in me else ''
    for m in re.finditer(r'\b(crate|super|self)((?:::[A-Za-z_0-9]+)+)',s):
        head,rest=m.group(1),[x for x in m.group(2).split('::') if x]
        if head=='crate': base=[]
        elif head=='self': base=me.split('::') if is_dir_mod or True else []
        else: base=parent.split('::') if parent else []
        if head=='self' and not is_dir_mod: base=me.split('::')
        t=resolve(base+rest) if base+rest else None
        # a child's use of its ancestors' items is how Rust's module tree works: not counted
        if t and t!=me and t!='crate' and not me.startswith(t+'::'): deps[me].add(t)
    for child in re.findall(r'^\s*(?:pub(?:\([a-z]+\))? )?mod ([a-z_0-9]+);',s,flags=re.M):
        if me!='crate' and re.search(r'\b'+child+r'::',s):
            t=resolve(me.split('::')+[child])
            if t: deps[me].add(t)
if '--top' in sys.argv:
    # circles among the crate's top-level modules (folders taken whole)
    top=lambda m: m.split('::')[0]
    d2=collections.defaultdict(set)
    for a,bs in deps.items():
        for b in bs:
            if top(a)!=top(b): d2[top(a)].add(top(b))
    deps=d2
idx={};low={};st=[];on=set();sccs=[];c=[0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v]=low[v]=c[0];c[0]+=1;st.append(v);on.add(v)
    for w in deps.get(v,()):
        if w not in idx: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],idx[w])
    if low[v]==idx[v]:
        comp=[]
        while True:
            w=st.pop();on.discard(w);comp.append(w)
            if w==v:break
        if len(comp)>1: sccs.append(comp)
for v in list(deps):
    if v not in idx: sc(v)
for s in sccs:
    print(sorted(s))
    for a in sorted(s):
        print('   ',a,'->',sorted(d for d in deps[a] if d in s))
print(len(sccs),'circles')
sys.exit(1 if sccs else 0)
