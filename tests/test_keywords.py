"""Candidate rules (docs/method.md §1) on hand-written captions, and the sampler (docs/method.md §1)."""

import random
from collections import Counter

import pytest

from concrete_jungle.plant.keywords import Candidate, KeywordSampler, SamplerConfig, extract_candidates
from concrete_jungle.sources import anchor_caption


def candidates(nlp, ratings, caption):
    found = extract_candidates(nlp(caption), ratings)
    for c in found:  # every candidate records where it stands in the caption
        assert caption[c.start:c.end] == c.text
    return {(c.text, c.category) for c in found}


@pytest.mark.parametrize("caption, expected", [
    ("A cat sitting under a table", ("under", "relation")),
    ("A woman holding a coffee cup", ("coffee cup", "object")),
    ("A red helmet", ("red", "attribute")),
    ("two dogs", ("two", "attribute")),
    ("A car parked in front of a fire hydrant", ("front", "relation")),
    ("A car parked in front of a fire hydrant", ("fire hydrant", "object")),
    ("A car parked in front of a fire hydrant", ("parked", "attribute")),
    ("A woman holding a coffee cup", ("holding", "relation")),
    ("A lamp placed to the left of the sofa", ("left", "relation")),
    ("A dog sleeping next to a cat", ("next", "relation")),
    ("A man in a T-shirt riding a horse", ("T-shirt", "object")),
    ("Some sliced bread on a plate", ("sliced", "attribute")),
    ("A black and white dog on the grass", ("white", "attribute")),
    # en_core_web_sm parses `green` as a compound of `ball` here; it is still the ball's colour
    ("a small checkered green ball next to a tiny red star", ("green", "attribute")),
])
def test_candidate_rules(nlp, ratings, caption, expected):
    assert expected in candidates(nlp, ratings, caption)


def test_phrase_words_and_compound_parts_are_not_candidates_on_their_own(nlp, ratings):
    found = candidates(nlp, ratings, "A car parked in front of a fire hydrant")
    texts = {t for t, _ in found}
    assert not texts & {"in", "of", "fire", "hydrant", "car parked"}
    assert ("car", "object") in found


def test_quantifiers_and_light_verbs_are_no_candidates(nlp, ratings):
    texts = {t for t, _ in candidates(nlp, ratings, "Several other people have many bags")}
    assert not texts & {"Several", "other", "have", "many"}


def test_relation_needs_a_nominal_object(nlp, ratings):
    texts = {t for t, c in candidates(nlp, ratings, "A bird flying over") if c == "relation"}
    assert "over" not in texts


def test_anchor_is_the_caption_with_most_tokens_first_on_ties():
    assert anchor_caption(["A dog.", "A dog on a red sofa.", "A cat on a red sofa."]) == "A dog on a red sofa."
    assert anchor_caption(["", "   "]) is None


def cand(text, category, c):
    return Candidate(text, 0, len(text), category, c, text)


MIXED = [cand("red", "attribute", 4.2), cand("dog", "object", 4.9), cand("under", "relation", 3.4),
         cand("old", "attribute", 2.7), cand("cup", "object", 4.8)]


def test_top_k_keeps_most_or_least_concrete():
    hc = KeywordSampler(SamplerConfig(mode="hc", top_k=2))
    lc = KeywordSampler(SamplerConfig(mode="lc", top_k=2))
    wo = KeywordSampler(SamplerConfig(mode="wo", top_k=2))
    assert {c.text for c in hc.kept(MIXED)} == {"dog", "cup"}
    assert {c.text for c in lc.kept(MIXED)} == {"old", "under"}
    assert len(wo.kept(MIXED)) == len(MIXED)


def test_softmax_weights_follow_concreteness():
    picks = Counter(KeywordSampler(SamplerConfig(mode="hc", top_k=5, temperature=0.5)).choose(str(i), MIXED).text
                    for i in range(3000))
    assert picks["dog"] > picks["red"] > picks["old"]
    lc_minus = Counter(KeywordSampler(SamplerConfig(mode="lc", top_k=2, lc_softmax="-c", temperature=0.5))
                       .choose(str(i), MIXED).text for i in range(3000))
    lc_plus = Counter(KeywordSampler(SamplerConfig(mode="lc", top_k=2, lc_softmax="c", temperature=0.5))
                      .choose(str(i), MIXED).text for i in range(3000))
    assert lc_minus["old"] > lc_minus["under"] and lc_plus["under"] > lc_plus["old"]


def test_relation_first_takes_a_kept_relation():
    sampler = KeywordSampler(SamplerConfig(mode="wo", policy="relation-first"))
    assert all(sampler.choose(str(i), MIXED).category == "relation" for i in range(200))


@pytest.mark.parametrize("policy, targets", [
    ("quota", {"attribute": 0.3, "object": 0.5, "relation": 0.2}),
    ("relation-first", {"attribute": 0.4, "object": 0.6}),
])
def test_quota_shares_within_two_percent(policy, targets):
    rng = random.Random(1)
    sampler = KeywordSampler(SamplerConfig(mode="wo", policy=policy, targets=targets))
    relation_free = [c for c in MIXED if c.category != "relation"]
    picks = []
    for i in range(2000):
        # relation-first balances attribute/object on captions without a relation
        pool = relation_free if policy == "relation-first" else MIXED
        picks.append(sampler.choose(f"s{i}", rng.sample(pool, len(pool))).category)
    shares = Counter(picks)
    for category, target in targets.items():
        assert abs(shares[category] / 2000 - target) <= 0.02, (category, shares)


def test_quota_state_round_trips():
    a = KeywordSampler(SamplerConfig(mode="wo", policy="quota"))
    for i in range(50):
        a.choose(str(i), MIXED)
    b = KeywordSampler(SamplerConfig(mode="wo", policy="quota"))
    b.load_state_dict(a.state_dict())
    assert [a.choose(f"x{i}", MIXED) for i in range(50)] == [b.choose(f"x{i}", MIXED) for i in range(50)]


def test_choice_depends_on_seed_and_id_not_on_order_or_shard():
    ids = [f"img{i}" for i in range(300)]
    config = SamplerConfig(mode="hc", top_k=4, seed=7)
    straight = {i: KeywordSampler(config).choose(i, MIXED).text for i in ids}
    shuffled = ids[:]
    random.Random(3).shuffle(shuffled)
    one = KeywordSampler(config)
    assert {i: one.choose(i, MIXED).text for i in shuffled} == straight
    shard_a, shard_b = KeywordSampler(config), KeywordSampler(config)
    sharded = {i: (shard_a if n % 2 else shard_b).choose(i, MIXED).text for n, i in enumerate(ids)}
    assert sharded == straight
    other_seed = {i: KeywordSampler(SamplerConfig(mode="hc", top_k=4, seed=8)).choose(i, MIXED).text for i in ids}
    assert other_seed != straight


@pytest.mark.parametrize("bad, match", [
    ({"mode": "xx"}, "mode"), ({"policy": "greedy"}, "policy"), ({"top_k": 0}, "top_k"),
    ({"temperature": 0}, "temperature"), ({"targets": {"colour": 1.0}}, "targets"), ({"lc_softmax": "+"}, "lc_softmax"),
])
def test_sampler_config_is_validated(bad, match):
    with pytest.raises(ValueError, match=match):
        SamplerConfig(**bad)


def test_a_word_is_rated_by_its_surface_form_first_then_its_lemma_and_records_which(nlp, ratings):
    """The parser's lemma of `riding` is `rid` (2.13): the word itself is rated (4.14); a plural the norms do not
    rate falls back to its lemma."""
    found = {c.text: (c.rated, c.concreteness) for c in extract_candidates(
        nlp("A man riding a horse past three horses and sliced bread"), ratings)}
    assert found["riding"] == ("riding", ratings.get("riding")) == ("riding", 4.14)
    assert found["horses"] == ("horse", ratings.get("horse"))
    assert found["sliced"] == ("sliced", ratings.get("sliced"))
