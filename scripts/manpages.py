#!/usr/bin/env python3
"""Writes one man page per command of `keysmith` from its own argument definitions
(`keysmith --experimental-dump-help`, swift-argument-parser's description of every command,
option and argument): keysmith.1, keysmith-token.1, keysmith-token-get.1, …

    keysmith --experimental-dump-help | python3 scripts/manpages.py DIRECTORY VERSION

Prints the pages' paths, one a line."""
import json
import os
import sys

directory, version = sys.argv[1], sys.argv[2]
tool = json.load(sys.stdin)["command"]


def roff(text):
    """Text as roff sees it: backslashes and hyphens escaped, no line starting a request."""
    text = (text or "").replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + line) if line.startswith((".", "'")) else line for line in text.split("\n"))


def names(argument):
    shown = []
    for name in argument.get("names", []):
        shown.append(("-" if name["kind"] == "short" else "--") + name["name"])
    return shown


def page(command, path):
    title = "-".join(path)
    lines = ['.TH "%s" 1 "" "keysmith %s" "Keysmith Manual"' % (title.upper(), roff(version)),
             ".SH NAME", "%s \\- %s" % (roff(title), roff(command.get("abstract", "")))]
    arguments = [a for a in command.get("arguments", []) if a.get("shouldDisplay", True)]
    subcommands = [s for s in command.get("subcommands", []) if s.get("shouldDisplay", True) and s["commandName"] != "help"]
    synopsis = ".B %s" % roff(" ".join(path))
    usage = []
    for argument in arguments:
        value = argument.get("valueName", "value")
        if argument["kind"] == "positional":
            text = "\\fI%s\\fR" % roff(value)
        elif argument["kind"] == "flag":
            text = "\\fB%s\\fR" % roff(names(argument)[0] if names(argument) else value)
        else:
            text = "\\fB%s\\fR \\fI%s\\fR" % (roff(names(argument)[0] if names(argument) else value), roff(value))
        if argument.get("isOptional"):
            text = "[" + text + "]"
        if argument.get("isRepeating"):
            text += "\\&..."
        usage.append(text)
    if subcommands:
        usage.insert(0, "\\fIsubcommand\\fR")
    lines += [".SH SYNOPSIS", synopsis] + ([" ".join(usage)] if usage else [])
    if command.get("abstract") or command.get("discussion"):
        lines += [".SH DESCRIPTION", roff(command.get("abstract", ""))]
        if command.get("discussion"):
            lines += [".PP", roff(command["discussion"])]
    if arguments:
        lines.append(".SH OPTIONS")
        for argument in arguments:
            value = argument.get("valueName", "value")
            if argument["kind"] == "positional":
                head = "\\fI%s\\fR" % roff(value)
            else:
                head = ", ".join("\\fB%s\\fR" % roff(n) for n in names(argument))
                if argument["kind"] == "option":
                    head += " \\fI%s\\fR" % roff(value)
            lines += [".TP", head, roff(argument.get("abstract", "")) or "\\&"]
            if argument.get("discussion"):
                lines.append(roff(argument["discussion"] if isinstance(argument["discussion"], str) else ""))
    if subcommands:
        lines.append(".SH SUBCOMMANDS")
        for sub in subcommands:
            lines += [".TP", "\\fB%s\\fR" % roff(sub["commandName"]), roff(sub.get("abstract", "")) or "\\&"]
    related = ["-".join(path[:-1])] if len(path) > 1 else []
    related += ["-".join(path + [s["commandName"]]) for s in subcommands]
    if related:
        lines += [".SH SEE ALSO", ", ".join("\\fB%s\\fR(1)" % roff(r) for r in related)]
    file = os.path.join(directory, title + ".1")
    with open(file, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    print(file)
    for sub in subcommands:
        page(sub, path + [sub["commandName"]])


os.makedirs(directory, exist_ok=True)
page(tool, [tool["commandName"]])
