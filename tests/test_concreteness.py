import pytest

from concrete_jungle.plant.concreteness import RatingsError, load_ratings


def test_the_brysbaert_scale_has_the_published_size_and_values(ratings):
    # 37,058 words and 2,896 two-word expressions (Brysbaert et al. 2014); the check of every value against the
    # original file is benchmarks/check_ratings.py, which takes that file's path
    assert len(ratings) == 39_954
    # keys are normalised: the two hyphenated single words (yo-yo, t-shirt) read as two words too
    assert sum(" " in word for word in ratings.scores) == 2_896 + 2
    assert all(1.0 <= v <= 5.0 for v in ratings.scores.values())
    published = {"red": 4.24, "banana": 5.0, "dog": 4.85, "democracy": 1.78, "justice": 1.45, "coffee cup": 5.0}
    assert {w: ratings.get(w) for w in published} == published


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


@pytest.mark.parametrize("score", ["nan", "inf", "-inf"])
def test_a_user_csv_score_that_is_not_finite_is_refused_naming_its_line(tmp_path, score):
    path = tmp_path / "mine.csv"
    path.write_text(f"token,score\nred,4.5\nblue,{score}\n")
    with pytest.raises(RatingsError, match=rf"mine.csv, line 3: score '{score}'.*not finite"):
        load_ratings(path=str(path), word_column="token", score_column="score")
