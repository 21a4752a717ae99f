"""Build the bundled multi-label task novel_characters from the bundled novel_authorship passages.

Each passage is labelled with every main character of its novel that it names (a whole-word match of one of
the character's names, searched only in passages of that character's own novel, so "Catherine" in Pride and
Prejudice is not Northanger Abbey's heroine). A passage may name none, one or several: a multi-label task whose
labels are derived from the text itself by a stated rule, so nothing is hand-labelled and anyone can rebuild it.
The passages, ids and splits are novel_authorship's; its `label` (the author) is dropped.

    python scripts/make_novel_characters.py   # writes litebert/data/novel_characters/{train,dev,test}.jsonl.gz
"""

import argparse
import gzip
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "litebert" / "data"
SOURCE, TARGET = ROOT / "novel_authorship", ROOT / "novel_characters"

# novel (as in the passage ids) -> {character: names that refer to them in that novel}
CHARACTERS = {
    "twenty-thousand-leagues-under-the-sea": {"Captain Nemo": ["Nemo"], "Ned Land": ["Ned"],
                                              "Conseil": ["Conseil"]},
    "great-expectations": {"Pip": ["Pip"], "Joe Gargery": ["Joe"], "Herbert Pocket": ["Herbert"],
                           "Estella": ["Estella"], "Miss Havisham": ["Havisham"], "Mr. Jaggers": ["Jaggers"]},
    "emma": {"Emma Woodhouse": ["Emma"], "Harriet Smith": ["Harriet"], "Mr. Knightley": ["Knightley"]},
    "mansfield-park": {"Fanny Price": ["Fanny"], "Edmund Bertram": ["Edmund"]},
    "pride-and-prejudice": {"Elizabeth Bennet": ["Elizabeth", "Lizzy", "Eliza"], "Mr. Darcy": ["Darcy"]},
    "sense-and-sensibility": {"Elinor Dashwood": ["Elinor"], "Marianne Dashwood": ["Marianne"]},
    "northanger-abbey": {"Catherine Morland": ["Catherine"]},
    "persuasion": {"Anne Elliot": ["Anne"], "Captain Wentworth": ["Wentworth"]},
}


def characters_named(novel: str, text: str) -> list[str]:
    return sorted(name for name, words in CHARACTERS.get(novel, {}).items()
                  if any(re.search(rf"\b{re.escape(w)}\b", text) for w in words))


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    TARGET.mkdir(exist_ok=True)
    for split in ("train", "dev", "test"):
        with gzip.open(SOURCE / f"{split}.jsonl.gz", "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        out = [{"id": r["id"], "text": r["text"], "characters": characters_named(r["id"].split("/")[1], r["text"])}
               for r in rows]
        # mtime=0: the same passages give byte-identical files
        with gzip.GzipFile(TARGET / f"{split}.jsonl.gz", "wb", mtime=0) as f:
            f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out).encode("utf-8"))
        named = sum(bool(r["characters"]) for r in out)
        print(f"{split}: {len(out)} passages, {named} name at least one character, "
              f"{sum(len(r['characters']) > 1 for r in out)} several")


if __name__ == "__main__":
    main()
