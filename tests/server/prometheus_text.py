"""Prometheus' text format as the server tests read it: samples with their labels, and the
checks every histogram must pass."""
import re

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """[(name, {label: value}, float)] for every sample line; '# ...' lines are skipped."""
    samples = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        if not match:
            raise AssertionError(f"not a Prometheus sample line: {line!r}")
        name, labels, value = match.groups()
        samples.append((name, dict(LABEL.findall(labels or "")), float(value)))
    return samples


def value(samples, name, **labels):
    """The one sample of `name` whose labels include `labels` (model_name aside)."""
    found = [v for n, l, v in samples if n == name and all(l.get(k) == x for k, x in labels.items())]
    if len(found) != 1:
        raise AssertionError(f"{len(found)} samples of {name} {labels}")
    return found[0]


def histogram(samples, name):
    """{'buckets': [(le, cumulative count)] in order of le, 'count', 'sum'}; checks that the
    buckets never decrease and that +Inf equals the count."""
    buckets = [(float(l["le"]), v) for n, l, v in samples if n == name + "_bucket"]
    buckets.sort(key=lambda b: b[0])
    count, total = value(samples, name + "_count"), value(samples, name + "_sum")
    if not buckets or buckets[-1][0] != float("inf"):
        raise AssertionError(f"{name}: no +Inf bucket")
    for (le_a, a), (le_b, b) in zip(buckets, buckets[1:]):
        if b < a:
            raise AssertionError(f"{name}: bucket le={le_b} ({b}) < le={le_a} ({a})")
    if buckets[-1][1] != count:
        raise AssertionError(f"{name}: +Inf bucket {buckets[-1][1]} != count {count}")
    return {"buckets": buckets, "count": count, "sum": total}


def histogram_delta(before, after):
    """What a histogram gained between two scrapes; the gain must be a histogram too."""
    if [le for le, _ in before["buckets"]] != [le for le, _ in after["buckets"]]:
        raise AssertionError("the bucket bounds changed between scrapes")
    buckets = [(le, b - a) for (le, a), (_, b) in zip(before["buckets"], after["buckets"])]
    for (le, d) in buckets:
        if d < 0:
            raise AssertionError(f"bucket le={le} went down by {-d}")
    for (le_a, a), (le_b, b) in zip(buckets, buckets[1:]):
        if b < a:
            raise AssertionError(f"gained buckets decrease: le={le_b} ({b}) < le={le_a} ({a})")
    return {"buckets": buckets, "count": after["count"] - before["count"],
            "sum": after["sum"] - before["sum"]}
