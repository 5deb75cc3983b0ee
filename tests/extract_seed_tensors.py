#!/usr/bin/env python3
"""Extract every tensor the seed notebooks 000, 002 and 003 print.

Writes tests/seed_tensors.txt: one block per printed tensor, from "tensor("
to its closing parenthesis, grad_fn suffixes removed, blocks separated by a
line "----". test_seed_tensors checks that `attn demo` prints each of them.

usage: extract_seed_tensors.py SEEDS_DIR > tests/seed_tensors.txt
"""
import glob
import os
import re
import sys


def blocks(text):
    out = []
    i = 0
    while True:
        j = text.find("tensor(", i)
        if j < 0:
            return out
        line_start = text.rfind("\n", 0, j) + 1
        line = text[line_start:text.find("\n", j)]
        if "torch.tensor(" in line or line.lstrip().startswith("#"):
            i = j + 7
            continue
        depth, k = 0, j + 6
        while k < len(text):
            if text[k] == "(":
                depth += 1
            elif text[k] == ")":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        block = text[j:k + 1]
        block = re.sub(r",\s*grad_fn=<\w+>", "", block)
        out.append(block)
        i = k + 1


def main():
    seeds = sys.argv[1]
    allb = []
    for prefix in ("000", "002", "003"):
        (path,) = glob.glob(os.path.join(seeds, prefix + "_*.txt"))
        with open(path, encoding="utf-8") as f:
            b = blocks(f.read())
        sys.stderr.write("%s: %d tensors\n" % (os.path.basename(path), len(b)))
        allb += b
    sys.stderr.write("total: %d\n" % len(allb))
    sys.stdout.write("\n----\n".join(allb) + "\n")


if __name__ == "__main__":
    main()
