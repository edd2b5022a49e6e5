#!/usr/bin/env python3
"""Renders deploy/helm/gpumemd without a helm binary (none is packaged in
the registries CI reaches). It implements exactly the template subset the
chart uses, and fails loudly on anything else, so a template that needs
more cannot pass CI unrendered:
  {{ .Values.a.b }}, {{ .Release.Name }}, {{ .Release.Namespace }},
  {{ .Chart.AppVersion }}, {{ .Files.Get "path" }}, `toYaml X`, `quote X`,
  pipes into `nindent N`, `quote` and `replace "OLD" NEW`, {{ if X }} ... {{ end }}, and the
  `{{-` / `-}}` whitespace trims, with Go template truthiness.
Usage: helm-render.py CHART [--set-json KEY=JSON]... > manifests.yaml
"""
import json, os, re, sys
import yaml

ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


def tokens(text):
    out, pos = [], 0
    for m in ACTION.finditer(text):
        out.append(["text", text[pos:m.start()]])
        if m.group(1):
            out[-1][1] = out[-1][1].rstrip(" \t\r\n")
        out.append(["act", m.group(2), bool(m.group(3))])
        pos = m.end()
    out.append(["text", text[pos:]])
    for i, t in enumerate(out):  # right trims eat the following whitespace
        if t[0] == "act" and t[2] and i + 1 < len(out):
            out[i + 1][1] = out[i + 1][1].lstrip(" \t\r\n")
    return out


def tree(toks, i=0, stop=False):
    nodes = []
    while i < len(toks):
        t = toks[i]
        if t[0] == "text":
            nodes.append(("text", t[1]))
        elif t[1] == "end":
            if not stop:
                raise SystemExit("helm-render: `end` without `if`")
            return nodes, i
        elif t[1].startswith("if "):
            body, i = tree(toks, i + 1, True)
            nodes.append(("if", t[1][3:].strip(), body))
        elif t[1].startswith("/*"):
            pass
        else:
            nodes.append(("expr", t[1]))
        i += 1
    if stop:
        raise SystemExit("helm-render: `if` without `end`")
    return nodes, i


def truthy(v):
    return not (v is None or v is False or v == 0 or v == "" or v == [] or v == {})


def to_yaml(v):
    return yaml.safe_dump(v, default_flow_style=False, sort_keys=True).rstrip("\n")


class Ctx:
    def __init__(self, chart, values, name, namespace):
        self.chart, self.values, self.name, self.namespace = chart, values, name, namespace
        with open(os.path.join(chart, "Chart.yaml")) as f:
            self.meta = yaml.safe_load(f)

    def term(self, t):
        t = t.strip()
        if t.startswith(".Values"):
            v = self.values
            for k in [p for p in t[len(".Values"):].split(".") if p]:
                v = v.get(k) if isinstance(v, dict) else None
            return v
        if t == ".Release.Name":
            return self.name
        if t == ".Release.Namespace":
            return self.namespace
        if t == ".Chart.AppVersion":
            return str(self.meta["appVersion"])
        m = re.fullmatch(r'\.Files\.Get\s+"([^"]+)"', t)
        if m:
            with open(os.path.join(self.chart, m.group(1))) as f:
                return f.read()
        m = re.fullmatch(r"(toYaml|quote)\s+(.+)", t)
        if m:
            return self.func(m.group(1), [], self.term(m.group(2)))
        raise SystemExit(f"helm-render: unsupported term `{t}`")

    def func(self, name, args, v):
        if name == "nindent" and len(args) == 1:
            pad = " " * int(args[0])
            return "\n" + pad + str(v).replace("\n", "\n" + pad)
        if name == "quote" and not args:
            return json.dumps("" if v is None else str(v))
        if name == "toYaml" and not args:
            return to_yaml(v)
        if name == "replace" and len(args) == 2:
            old, new = (json.loads(a) if a.startswith('"') else self.term(a) for a in args)
            return str(v).replace(str(old), str(new))
        raise SystemExit(f"helm-render: unsupported function `{name} {args}`")

    def expr(self, e):
        first, *pipes = e.split("|")
        v = self.term(first)
        for p in pipes:
            name, *args = p.split()
            v = self.func(name, args, v)
        return v

    def render(self, nodes):
        out = []
        for n in nodes:
            if n[0] == "text":
                out.append(n[1])
            elif n[0] == "if":
                if truthy(self.expr(n[1])):
                    out.append(self.render(n[2]))
            else:
                v = self.expr(n[1])
                out.append("" if v is None else (to_yaml(v) if isinstance(v, (dict, list)) else str(v)))
        return "".join(out)


def main():
    chart, sets = sys.argv[1], sys.argv[2:]
    with open(os.path.join(chart, "values.yaml")) as f:
        values = yaml.safe_load(f)
    while sets:
        flag, kv = sets[0], sets[1]
        sets = sets[2:]
        if flag != "--set-json":
            raise SystemExit(f"helm-render: unknown flag {flag}")
        key, val = kv.split("=", 1)
        *path, last = key.split(".")
        target = values
        for k in path:
            target = target.setdefault(k, {})
        target[last] = json.loads(val)
    ctx = Ctx(chart, values, "gpumemd", "monitoring")
    tdir = os.path.join(chart, "templates")
    for name in sorted(os.listdir(tdir)):
        if not name.endswith(".yaml"):
            continue
        with open(os.path.join(tdir, name)) as f:
            nodes, _ = tree(tokens(f.read()))
        text = ctx.render(nodes).strip("\n")
        if text.strip():
            print(f"---\n# Source: gpumemd/templates/{name}\n{text}")


main()
