#!/usr/bin/env python3
"""Generate the fixed embeddings benchmark corpus: 1,024 English sentences of 8-60 words.

Deterministic (random.Random(20240611), no other input); writes
pipelines/bert/bench/corpus.txt, one sentence per line. `favlo bench embeddings`
(favlo_bert::bench) and tools/bench/embeddings_anchor.py both read that file.
"""
import pathlib
import random

SUBJECTS = """the engineer|a small team|my neighbour|the committee|our research group|the old
library|a young student|the city council|the delivery driver|every musician|the local bakery|
the support agent|a curious child|the weather service|the museum curator|the night nurse|
a retired teacher|the open-source project|the football coach|the software update""".replace("\n", " ").split("|")
VERBS = """reviewed|described|measured|repaired|announced|questioned|painted|translated|
compared|scheduled|rejected|celebrated|documented|predicted|recorded|explained|organised|
tested|ignored|rebuilt""".replace("\n", " ").split("|")
OBJECTS = """the quarterly budget|a broken bicycle|the migration plan|an unusual noise|the new
bridge|several old photographs|the training data|a long letter|the river flood|the evening
concert|the database schema|a forgotten recipe|the election results|the solar panels|
a detailed map|the customer complaints|the harvest festival|the memory leak|the train
timetable|a rare butterfly""".replace("\n", " ").split("|")
TAILS = """before the deadline|after a long discussion|without any warning|in the early
morning|with great care|during the storm|for the second time|despite the heavy rain|
while everyone was watching|at the end of the week|under difficult conditions|in front
of the whole village|with help from volunteers|because nobody else would|as the sun went
down|on a cold winter night|to the surprise of many|in less than an hour|after months of
planning|using only simple tools""".replace("\n", " ").split("|")
FILLER = """and|but|so|then|meanwhile|however|because|although|while|since""".split("|")


SUBJECTS, VERBS, OBJECTS, TAILS = ([p.strip() for p in part] for part in (SUBJECTS, VERBS, OBJECTS, TAILS))


def clause(rng: random.Random) -> list[str]:
    words = [rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS)]
    if rng.random() < 0.7:
        words.append(rng.choice(TAILS))
    return " ".join(words).split()


def sentence(rng: random.Random) -> str:
    target = rng.randint(8, 60)
    words = clause(rng)
    while len(words) < target:
        words += [rng.choice(FILLER)] + clause(rng)
    words = words[:target]
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice([".", ".", ".", "!", "?"])


def main() -> None:
    rng = random.Random(20240611)
    lines = [sentence(rng) for _ in range(1024)]
    out = pathlib.Path(__file__).resolve().parents[2] / "pipelines/bert/bench/corpus.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(lines)} sentences)")


if __name__ == "__main__":
    main()
