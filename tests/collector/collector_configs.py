"""Every OpenTelemetry Collector configuration the repository ships or shows, found wherever it is.

A collector configuration is a YAML mapping with a `service` key beside `receivers` or `exporters`. They are
looked for in every file git tracks (or would: untracked, not ignored) outside tests/ (the tests' own configurations are checked by running
them): YAML files (every document, every nested mapping, and every string value that is itself such a
YAML document, as in a ConfigMap's `data:`), and the fenced blocks of Markdown and text files (docs/*.md,
README.md, the Helm chart's NOTES.txt). A file that has a `receivers:` line where nothing was found is an
error of its own, so a configuration written in a form this module does not understand (a Helm template, a
shell here-document) cannot be missed silently: teach this module the form.
"""
import os
import re
import subprocess

import yaml

SKIP_PREFIXES = ("tests/", "target/", "fuzz/", ".")
TEXT_SUFFIXES = (".yaml", ".yml", ".md", ".txt", ".tpl", ".sh", ".json", ".toml", ".conf")
KEY_LINE = re.compile(r"^\s*(receivers|exporters):\s*(#.*)?$", re.M)
FENCE = re.compile(r"^([ \t]*)(```|~~~)[^\n]*\n(.*?)^\1\2[ \t]*$", re.M | re.S)


class Found:
    """One configuration: where it is (file and a location inside it) and its YAML text."""

    def __init__(self, path, where, text, line):
        self.path, self.where, self.text, self.line = path, where, text, line

    @property
    def name(self):
        return f"{self.path}{self.where}"


def tracked_files(root):
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root, capture_output=True, check=True).stdout
        files = [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = [os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs]
    return sorted(f for f in files if not f.startswith(SKIP_PREFIXES) and f.endswith(TEXT_SUFFIXES))


def is_config(node):
    return isinstance(node, dict) and "service" in node and ("receivers" in node or "exporters" in node)


def configs_in(node, where):
    """(location, mapping) of every configuration inside a parsed YAML node, strings holding YAML included."""
    if is_config(node):
        yield where, node
        return
    if isinstance(node, dict):
        for k, v in node.items():
            yield from configs_in(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from configs_in(v, f"{where}[{i}]")
    elif isinstance(node, str) and KEY_LINE.search(node):
        try:
            for i, doc in enumerate(yaml.safe_load_all(node)):
                yield from configs_in(doc, f"{where}#{i}")
        except yaml.YAMLError:
            return


def find(root):
    """(every configuration found, every file with a `receivers:`/`exporters:` line and none found)."""
    found, unexplained = [], []
    for rel in tracked_files(root):
        with open(os.path.join(root, rel), errors="replace") as f:
            text = f.read()
        if not KEY_LINE.search(text):
            continue
        here = []
        if rel.endswith((".yaml", ".yml")):
            try:
                for i, doc in enumerate(yaml.safe_load_all(text)):
                    for where, cfg in configs_in(doc, f"#{i}" if i else ""):
                        here.append(Found(rel, where, yaml.safe_dump(cfg, sort_keys=False), 1))
            except yaml.YAMLError:
                pass
            if len(here) == 1 and not here[0].where and is_config(yaml.safe_load(text)):
                here = [Found(rel, "", text, 1)]  # the file as written (comments, ${env:...}) is the config
        for m in FENCE.finditer(text):
            block = m.group(3)
            if not KEY_LINE.search(block):
                continue
            line = text.count("\n", 0, m.start()) + 2
            try:
                docs = list(yaml.safe_load_all(block))
            except yaml.YAMLError:
                continue
            for i, doc in enumerate(docs):
                for where, cfg in configs_in(doc, ""):
                    text_of = block if len(docs) == 1 and not where else yaml.safe_dump(cfg, sort_keys=False)
                    here.append(Found(rel, f":{line}{where}", text_of, line))
        if here:
            found += here
        else:
            unexplained.append(rel)
    return found, unexplained
