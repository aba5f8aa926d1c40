"""`sdematrix mix FILE`'s default output: a summary of a mix a person reads
(the whole normalised mix is `--json`): totals, by vector width and
encoding, the top ISA sets, images and functions, and how many more there
are of each."""

from __future__ import annotations

from ..evidence.mix import Mix, MixCounts

TOP = 10


def _row(counter: dict[str, int], total: int, top: int = TOP) -> list[str]:
    items = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
    # count first: a C++ function name may be hundreds of characters long
    lines = [
        f"    {v:>14,} {100 * v / total if total else 0:5.1f}%  {k[:160]}" for k, v in items[:top]
    ]
    if len(items) > top:
        lines.append(f"    ... {len(items) - top} more (--json for all)")
    return lines


def _counts(c: MixCounts) -> dict[str, dict[str, int]]:
    return {
        "by width": dict(c.width.most_common()),
        "by encoding": dict(c.encoding.most_common()),
        "top ISA sets": dict(c.isa_set.most_common()),
    }


def summary_text(mix: Mix, name: str = "") -> str:
    o = mix.overall
    head = (
        f"{name or 'mix'} ({mix.source}): {o.total:,} instructions executed, "
        f"{len(mix.images)} images, {len(mix.functions)} functions, "
        f"{len(mix.threads)} threads"
    )
    out = [head]
    for title, counter in _counts(o).items():
        out.append(f"  {title}:")
        out += _row(counter, o.total)
    out.append("  top images:")
    out += _row({k.rsplit("/", 1)[-1] or k: v.total for k, v in mix.images.items()}, o.total)
    out.append("  top functions:")
    out += _row(
        {f"{f.name} ({f.image.rsplit('/', 1)[-1]})": f.counts.total for f in mix.functions}, o.total
    )
    return "\n".join(out) + "\n"
