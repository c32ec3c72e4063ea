import pytest

from concrete_jungle.concreteness import RatingsError, load_ratings, normalize


def test_every_brysbaert_value_matches_the_original_file(ratings, shared_data):
    original = {}
    lines = (shared_data / "concreteness" / "Concreteness_ratings_Brysbaert_et_al_BRM.txt").read_text(
        encoding="utf-8").splitlines()
    for line in lines[1:]:
        fields = line.split("\t")
        original[normalize(fields[0])] = (fields[1] == "1", float(fields[2]))
    assert len(original) == 39_954
    assert sum(bigram for bigram, _ in original.values()) == 2_896
    differ = sorted(w for w, (_, score) in original.items() if ratings.get(w) != score)
    missing = sorted(set(original) - set(ratings.scores))
    extra = sorted(set(ratings.scores) - set(original))
    assert not differ, f"{len(differ)} ratings differ from the original file: {differ[:20]}"
    assert not missing and not extra, (missing[:20], extra[:20])
    assert len(ratings) == 39_954


def test_hyphen_and_case_normalisation(ratings):
    assert ratings.get("T-shirt") == ratings.get("t shirt") == ratings.get("T  Shirt") == 4.93
    assert ratings.get("fire hydrant") == 4.85
    assert ratings.get("no-such-word-here") is None


def test_lookup_tries_forms_in_order(ratings):
    # two-word expression first, then lemma, then surface
    assert ratings.lookup("coffee cup", "cup", "cups") == ("coffee cup", 5.0)
    assert ratings.lookup(None, "dog", "dogs") == ("dog", ratings.get("dog"))
    assert ratings.lookup("zzq zzq", "zzqq", "dog") == ("dog", ratings.get("dog"))
    assert ratings.lookup("zzq zzq", "zzqq") is None


def test_lancaster_visual_scale():
    visual = load_ratings("lancaster-visual")
    assert visual.name == "lancaster-visual"
    assert len(visual) > 39_000
    assert 0 <= visual.get("red") <= 5


def test_user_csv(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("token,score,other\nRed,4.5,x\nT-Shirt,5,y\nblank,,z\n")
    mine = load_ratings(path=str(path), word_column="token", score_column="score")
    assert mine.get("red") == 4.5 and mine.get("t shirt") == 5.0 and mine.get("blank") is None


def test_user_csv_errors_name_the_file_and_fix(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("token,score\nred,high\n")
    with pytest.raises(RatingsError, match=r"line 2: score 'high'"):
        load_ratings(path=str(path), word_column="token", score_column="score")
    with pytest.raises(RatingsError, match=r"no column \['rating'\].*--score-column"):
        load_ratings(path=str(path), word_column="token", score_column="rating")
    with pytest.raises(RatingsError, match="not found"):
        load_ratings(path=str(tmp_path / "nope.csv"), score_column="score")
    with pytest.raises(RatingsError, match="unknown scale"):
        load_ratings("glasgow")
