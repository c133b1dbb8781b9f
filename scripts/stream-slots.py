#!/usr/bin/env python3
"""How evenly the large-T stream launch can spread its work over the SMs (PERF_NOTES.md, "Considered,
not built: half-slots of groups of 4 chunks").

The stream launch gives each SM one group of W = 8 chunks (its fn slice staged once); the group's
tokens are dealt over the SMs the group gets, sms // groups of them, so an SM's load is 8 / that
many chunk-tokens per token of T. The alternative: each half of a block owns its own group of 4
chunks (the same 98 KB of fn an SM), a group gets s or s + 1 halves (every half of every SM used),
and an SM's load is the sum of its two halves' 4 / s_g. Records per token double (H / 128).
Prints both for each H, and the same for attempt 166's warpgroup kernel, whose split fn fills an
SM with 4 chunks (so only halves of 2 chunks would fit).
    scripts/stream-slots.py [SMS]
"""
import sys


def one_group_an_sm(h, c, sms):
    groups = h // 32 // c
    per = sms // groups
    return groups, per, c / per


def halves(h, c, sms):
    """Groups of c chunks, two a SM (one a half), each group's tokens split evenly over its halves;
    the heaviest half slots paired with the lightest. Returns (groups, s, max SM load)."""
    groups = h // 32 // c
    slots = 2 * sms
    s = slots // groups
    more = slots - s * groups  # groups that get s + 1 halves
    loads = sorted([c / s] * ((groups - more) * s) + [c / (s + 1)] * (more * (s + 1)), reverse=True)
    n = len(loads)
    return groups, s, max(loads[i] + loads[n - 1 - i] for i in range(n // 2))


def main():
    sms = int(sys.argv[1]) if len(sys.argv) > 1 else 132
    for h in (4096, 5120, 7168):
        g0, per, l0 = one_group_an_sm(h, 8, sms)
        g, s, l = halves(h, 4, sms)
        floor = h // 32 / sms
        print(f"H = {h}: groups of 8, {g0} x {per} SMs ({g0 * per} busy), load {l0:.3f}; "
              f"halves of 4 chunks: {g} groups on {s}-{s + 1} halves, load {l:.3f} "
              f"({100 * (l / l0 - 1):+.1f} %); even split {floor:.3f}")
    for h in (4096, 5120, 7168):
        g0, per, l0 = one_group_an_sm(h, 4, sms)
        g, s, l = halves(h, 2, sms)
        print(f"H = {h}, warpgroup kernel: groups of 4, load {l0:.3f}; halves of 2 chunks {l:.3f} "
              f"({100 * (l / l0 - 1):+.1f} %)")


if __name__ == "__main__":
    main()
