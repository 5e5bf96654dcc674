#!/usr/bin/env python3
"""Lists every command-line flag Megatron-LM's parser defines, read from its source by an AST walk
(no torch needed): megatron/training/arguments.py's add_argument names, and the flags its
ArgumentGroupFactory makes of the configuration dataclasses (--field-name; --no-x and --disable-x
for a bool that defaults to True; a field's argparse_meta arg_names where given; each factory's
exclude list honoured). tests/test_emit.cpp's kMegatronFlags is taken from this list.

usage: megatron_flags.py GIT_DIR      (a clone or mirror of NVIDIA/Megatron-LM; reads its HEAD)
"""
import ast, subprocess, sys
git = sys.argv[1]
def show(p): return subprocess.run(["git", f"--git-dir={git}", "show", f"HEAD:{p}"], capture_output=True, text=True, check=True).stdout
args_src = show("megatron/training/arguments.py")
tree = ast.parse(args_src)
flags = set()
factories = []  # (class, exclude names)
def const_strs(node):
    return [e.value for e in getattr(node, "elts", []) if isinstance(e, ast.Constant) and isinstance(e.value, str)]
assigns = {}
for n in ast.walk(tree):
    if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.List):
        assigns[n.targets[0].id] = const_strs(n.value)
for n in ast.walk(tree):
    if isinstance(n, ast.Call):
        f = n.func
        if isinstance(f, ast.Attribute) and f.attr == "add_argument":
            for a in n.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--"): flags.add(a.value)
        if isinstance(f, ast.Name) and f.id == "ArgumentGroupFactory":
            cls = n.args[0].id
            ex = []
            for k in n.keywords:
                if k.arg == "exclude":
                    ex = assigns.get(k.value.id, []) if isinstance(k.value, ast.Name) else const_strs(k.value)
            factories.append((cls, set(ex)))
files = ["megatron/core/fault_injector.py", "megatron/core/model_parallel_config.py", "megatron/core/transformer/transformer_config.py"]
files += [l for l in subprocess.run(["git", f"--git-dir={git}", "ls-tree", "-r", "--name-only", "HEAD", "megatron/training/config/"], capture_output=True, text=True).stdout.split() if l.endswith(".py")]
classes = {}
for p in files:
    for n in ast.walk(ast.parse(show(p))):
        if isinstance(n, ast.ClassDef): classes[n.name] = n
def fields(cls):
    c = classes[cls]
    out = []
    for b in c.bases:
        if isinstance(b, ast.Name) and b.id in classes: out += fields(b.id)
    for s in c.body:
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
            out.append((s.target.id, s))
    return out
for cls, ex in factories:
    for name, s in fields(cls):
        if name in ex: continue
        v = s.value
        init, names, default = True, None, None
        if isinstance(v, ast.Call) and getattr(v.func, "id", getattr(v.func, "attr", "")) == "field":
            for k in v.keywords:
                if k.arg == "init" and isinstance(k.value, ast.Constant): init = k.value.value
                if k.arg == "default" and isinstance(k.value, ast.Constant): default = k.value.value
                if k.arg == "metadata" and isinstance(k.value, ast.Dict):
                    for mk, mv in zip(k.value.keys, k.value.values):
                        if isinstance(mk, ast.Constant) and mk.value == "argparse_meta" and isinstance(mv, ast.Dict):
                            for ak, av in zip(mv.keys, mv.values):
                                if isinstance(ak, ast.Constant) and ak.value == "arg_names": names = const_strs(av)
        elif isinstance(v, ast.Constant): default = v.value
        if not init: continue
        ann = ast.unparse(s.annotation)
        if names: flags.update(names)
        elif ann == "bool" and default is True:
            flags.add("--no-" + name.replace("_", "-")); flags.add("--disable-" + name.replace("_", "-"))
        else: flags.add("--" + name.replace("_", "-"))
for f in sorted(flags): print(f)
