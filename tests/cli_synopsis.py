"""The CLI synopses in README.md (the block under "## The command line")
and in `attn help` against the option tables (`attn CMD --help`): every
option a synopsis names for a command must be one of the command's options,
with the same value choices where the synopsis lists them (a|b|c), and
README's synopsis must show every command `attn help` lists. A synopsis that
drifts from the tables fails here.
usage: cli_synopsis.py ATTN README.md"""
import re
import subprocess
import sys

attn, readme = sys.argv[1], sys.argv[2]
TABLED = {"run", "sdpa", "heatmap", "train", "bench"}  # commands whose options come from a table
failures = []


def options_of(cmd):
    """{--option: choices or None} from `attn CMD --help`"""
    out = subprocess.run([attn, cmd, "--help"], capture_output=True, text=True).stdout
    opts = {}
    for line in out.splitlines():
        m = re.match(r"\s+(--[a-z0-9-]+)(?: (\S+))?", line)
        if m:
            arg = m.group(2)
            opts[m.group(1)] = arg if arg and "|" in arg else None
    return opts


def entries(lines):
    """(command, text) for each synopsis entry: a line naming `attn CMD` and its indented continuations"""
    out = []
    for line in lines:
        names = re.findall(r"\battn ([a-z]+)\b", line)  # the last: "mpirun -np N attn sdpa --ring" is sdpa's
        if names and not line.startswith(" "):
            out.append([names[-1], line])
        elif out and line.startswith(" "):
            out[-1][1] += " " + line
    return out


def check(where, lines):
    seen = set()
    for cmd, text in entries(lines):
        seen.add(cmd)
        if cmd not in TABLED:
            continue
        opts = options_of(cmd)
        for m in re.finditer(r"(--[a-z0-9-]+)(?:[ =]([A-Za-z0-9_.|-]+\|[A-Za-z0-9_.|-]+))?", text):
            opt, choices = m.group(1), m.group(2)
            if opt not in opts:
                failures.append(f"{where}: attn {cmd} has no option {opt}")
            elif choices and opts[opt] and choices != opts[opt]:
                failures.append(f"{where}: attn {cmd} {opt} takes {opts[opt]}, the synopsis says {choices}")
    return seen


text = open(readme).read()
m = re.search(r"^## The command line\n.*?^```\n(.*?)^```$", text, re.S | re.M)
if not m:
    sys.exit("cli_synopsis: README.md has no synopsis block under '## The command line'")
readme_cmds = check("README.md", m.group(1).splitlines())
help_out = subprocess.run([attn, "help"], capture_output=True, text=True).stdout
help_lines = [("attn " + l[2:]) if re.match(r"  [a-z]", l) else l for l in help_out.splitlines()]
help_cmds = check("attn help", [l for l in help_lines if not l.startswith("modules")])
for cmd in sorted(help_cmds - readme_cmds):
    failures.append(f"README.md: the synopsis does not show attn {cmd}")
for f in failures:
    print(f)
print(f"cli synopsis: {len(failures)} problems; README shows {len(readme_cmds)} commands")
sys.exit(1 if failures else 0)
