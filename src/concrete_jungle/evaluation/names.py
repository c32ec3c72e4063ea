"""The benchmark registry, importable without torch (the CLI's help lists it): per benchmark, its kind, headline
metrics, where its data sits under the data root, and the module that reads and scores it (one module per benchmark
in `benchmarks`, each with ``load_root(root, skip_missing)``, ``evaluate(encoder, data)`` and ``item_chances(data)``).
`benchmark_module` is the one place a benchmark's name becomes its module."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    kind: str  # "compositional" or "recognition": the summary's two means
    headlines: tuple[str, ...]  # the metrics its paper leads with, averaged into its headline number
    markers: tuple[str, ...]  # globs under the data root, any of which shows its data is there ("x/": a folder)
    layout: str  # its files under the data root, one line for `eval --help`
    module: str = ""  # its module in evaluation/benchmarks/; default: the benchmark's name
    reader: str = "load_root"  # that module's function reading the data root
    rule: int = 1  # the version of its scoring rule, which a result records: bumped when the rule changes


COMPOSITIONAL, RECOGNITION = "compositional", "recognition"

BENCHMARKS: dict[str, Benchmark] = {
    "sugarcrepe": Benchmark(COMPOSITIONAL, ("M.Avg",), ("sugarcrepe/*.json", "sugarcrepe/data/*.json"),
                            "sugarcrepe/data/*.json (git clone https://github.com/RAIVNLab/sugar-crepe sugarcrepe; "
                            "or the JSON in sugarcrepe/), images in coco/val2017/"),
    "sugarcrepe_pp": Benchmark(COMPOSITIONAL, ("M.Avg/ITT",), ("sugarcrepe_pp/*.json", "sugarcrepe_pp/data/*.json"),
                               "sugarcrepe_pp/data/*.json (git clone https://github.com/Sri-Harsha/scpp "
                               "sugarcrepe_pp; or the JSON in sugarcrepe_pp/), images in coco/val2017/"),
    "winoground": Benchmark(COMPOSITIONAL, ("group",), ("winoground/examples.jsonl", "winoground/data/examples.jsonl",
                                                        "winoground/**/test-*.parquet"),
                            "winoground/data/{examples.jsonl,images/} (huggingface-cli download facebook/winoground "
                            "--repo-type dataset --local-dir winoground, data/images.zip unzipped in data/), or its "
                            "data/test-*.parquet alone (read offline into winoground/examples.jsonl + images/ once)"),
    "aro": Benchmark(COMPOSITIONAL, ("VG-Relation", "VG-Relation (all relations)", "VG-Attribution"),
                     ("aro/visual_genome_relation.json", "aro/visual_genome_attribution.json"),
                     "aro/visual_genome_{relation,attribution}.json + aro/images/ (the ARO loaders' download: "
                     "vgr_vga_images.zip unzipped in aro/) (+ aro/vg_relation_symmetric.txt)"),
    "aro_order": Benchmark(COMPOSITIONAL, ("coco_order", "flickr30k_order"), reader="load",
                           markers=("coco/dataset_coco.json", "flickr30k/dataset_flickr30k.json"),
                           layout="COCO-Order and Flickr30k-Order from coco/dataset_coco.json and "
                           "flickr30k/dataset_flickr30k.json (the Karpathy files, their pictures as coco_retrieval and "
                           "retrieval read them)"),
    "valse": Benchmark(COMPOSITIONAL, ("VALSE",), ("valse/*.json", "valse/data/*.json"),
                       "valse/data/<piece>.json (git clone https://github.com/Heidelberg-NLP/VALSE valse; or the "
                       "pieces in valse/) + the pictures in valse/images/ or each piece's config.py folder beside "
                       "the pieces (foil-it: coco/val2014/)"),
    "whatsup": Benchmark(COMPOSITIONAL, ("controlled_a", "controlled_b", "coco_qa_one", "coco_qa_two", "vg_qa_one",
                                         "vg_qa_two"),
                         ("whatsup/controlled_images_dataset.json", "whatsup/controlled_clevr_dataset.json",
                          "whatsup/*_qa_*_obj.json"),
                         "whatsup/controlled_{images,clevr}_dataset.json + whatsup/controlled_{images,clevr}/; "
                         "whatsup/{coco,vg}_qa_{one,two}_obj.json + whatsup/val2017/ (or coco/val2017/), "
                         "whatsup/vg_images/ (the release's Drive folder in whatsup/, its archives unpacked there)"),
    "bivlc": Benchmark(COMPOSITIONAL, ("group",), ("bivlc/examples.jsonl", "bivlc/**/test-*.parquet"),
                       "bivlc/ (huggingface-cli download imirandam/BiVLC --repo-type dataset --local-dir bivlc: "
                       "its Parquet files, read offline into bivlc/examples.jsonl + bivlc/images/ once)"),
    "vismin": Benchmark(COMPOSITIONAL, ("macro/group",), ("vismin/examples.jsonl", "vismin/**/dataset_dict.json"),
                        "vismin/ (huggingface-cli download mair-lab/vismin-bench --repo-type dataset --local-dir "
                        "vismin: its save_to_disk data/, read offline into vismin/examples.jsonl + images/ once)",
                        rule=2),  # 2: each category rounded as metric.py before the macro
    "naturalbench": Benchmark(COMPOSITIONAL, ("group",), ("naturalbench/NaturalBench-Retrieval/metadata.json",),
                              "naturalbench/NaturalBench-Retrieval/{metadata.json,images/} (NaturalBench-Retrieval.zip "
                              "of the Hub dataset BaiqiL/NaturalBench unzipped in naturalbench/)"),
    "mmvp_vlm": Benchmark(COMPOSITIONAL, ("macro",), ("mmvp_vlm/Questions.csv",),
                          "mmvp_vlm/Questions.csv + mmvp_vlm/MLLM_VLM Images/<Type>/<id>.jpg (huggingface-cli download "
                          "MMVP/MMVP_VLM --repo-type dataset --local-dir mmvp_vlm)"),
    "eqben": Benchmark(COMPOSITIONAL, ("micro/group",), ("eqben/all_select.json", "eqben/eqben_vllm/all_select.json"),
                       "eqben/eqben_vllm/{all_select.json,images/} (eqben_vllm.zip unzipped in eqben/eqben_vllm/, as "
                       "t2v_metrics unzips it; or its files in eqben/)",
                       rule=2),  # 2: an item outside the source folders counts over all items
    "eqben_full": Benchmark(COMPOSITIONAL, ("groups/group",), ("eqben_full/ann_json_finegrained_random.json",),
                            "eqben_full/{ann_json_finegrained_random.json,src_file/,images/} (EqBen's full test set: "
                            "its annotation, the repository's src_file/, the image archive unpacked)",
                            module="eqben", reader="load_full_root"),
    "colorswap": Benchmark(COMPOSITIONAL, ("group",), ("colorswap/test.json", "colorswap/data/test.json"),
                           "colorswap/data/{test.json,images/} (the release's archive extracted into data/, "
                           "images.zip unzipped there; or its files in colorswap/)",
                           rule=2),  # 2: images converted to RGB before the transform
    "imagecode": Benchmark(COMPOSITIONAL, ("ImageCoDe",),
                           ("imagecode/valid_data.json", "imagecode/data/valid_data.json"),
                           "imagecode/data/{valid_data.json,image-sets/<set>/img<N>.jpg} (the repository's data/, "
                           "image-sets.zip unzipped in it; or its files in imagecode/)"),
    "crepe": Benchmark(COMPOSITIONAL, ("CREPE",), ("crepe/prod_hard_negatives/*/", "crepe/data/prod_hard_negatives/*/"),
                       "crepe/data/prod_hard_negatives/<type>/*.csv (productivity; git clone "
                       "https://github.com/RAIVNLab/CREPE crepe, data/prod_hard_negatives.zip unzipped in data/; or "
                       "prod_hard_negatives/ in crepe/) + crepe/vg/{VG_100K,VG_100K_2}/"),
    "vl_checklist": Benchmark(COMPOSITIONAL, ("VL-CheckList",), ("vl_checklist/data/",),
                              "vl_checklist/data/ (git clone https://github.com/om-ai-lab/VL-CheckList "
                              "vl_checklist) + vl_checklist/{vg,swig,hake}/ (its DATASETS.md)"),
    "spec": Benchmark(COMPOSITIONAL, ("i2t", "t2i"), ("spec/*/image2text.json", "spec/data/*/image2text.json"),
                      "spec/data/<subset>/{image2text,text2image}.json + the pictures they name (data.zip extracted "
                      "in spec/; or the subsets in spec/)"),
    "svo_probes": Benchmark(COMPOSITIONAL, ("SVO-Probes",), ("svo_probes/svo_probes.csv",),
                            "svo_probes/svo_probes.csv (git clone https://github.com/google-deepmind/svo_probes "
                            "svo_probes) + svo_probes/images/<image id>.jpg (fetched by you from its image_urls.txt)",
                            rule=2),  # 2: the official notebook's kinds and de-duplication
    "negbench": Benchmark(COMPOSITIONAL, ("coco_mcq", "voc2007_mcq"),
                          ("negbench/*_mcq_llama3.1_rephrased.csv", "negbench/images/*_mcq_llama3.1_rephrased.csv"),
                          "negbench/images/{COCO_val,VOC2007}_mcq_llama3.1_rephrased.csv (gdown --folder of the "
                          "release's Google Drive folder into negbench/) + coco/val2017/, "
                          "voc2007/VOCdevkit/VOC2007/JPEGImages/ (each picture by its file name)"),
    "negbench_retrieval": Benchmark(COMPOSITIONAL, ("coco_negated/image_retrieval_recall@1",),
                                    ("negbench/COCO_val_*retrieval*.csv", "negbench/images/COCO_val_*retrieval*.csv"),
                                    "negbench/images/COCO_val{,_negated}_retrieval*.csv (the same download) + "
                                    "coco/val2017/", module="negbench", reader="load_retrieval_root"),
    "cola": Benchmark(COMPOSITIONAL, ("multi_object",), ("cola/data/COLA_multiobjects_matching_benchmark.json",
                                                         "cola/COLA_multiobjects_matching_benchmark.json"),
                      "cola/data/COLA_multiobjects_matching_benchmark.json (git clone of the COLA repository into "
                      "cola/) + cola/images/<id>.jpg (its links downloaded)"),
    "hard_positives": Benchmark(COMPOSITIONAL, ("augmented",), ("hard_positives/data/*.json",),
                                "hard_positives/{data,swapped_data}/*.json (git clone https://github.com/amitakamath/"
                                "hard_positives hard_positives) + its data/VG_100K{,_2}/ "
                                "and data/images/ (ARO's VG images)"),
    "countbench": Benchmark(COMPOSITIONAL, ("accuracy",), ("countbench/CountBench.json", "countbench/examples.jsonl",
                                                           "countbench/**/train-*.parquet"),
                            "countbench/ (huggingface-cli download nielsr/countbench --repo-type dataset --local-dir "
                            "countbench: its Parquet file, read offline into countbench/examples.jsonl + images/ once; "
                            "or the release's CountBench.json + images/<position>.jpg fetched by you)"),
    "sdci": Benchmark(COMPOSITIONAL, ("all_swaps/SCM", "all_swaps/Neg"), ("sdci/densely_captioned_images/splits.json",),
                      "sdci/densely_captioned_images/{splits.json,complete/,photos/} (DCI's dci.tar.gz extracted in "
                      "sdci/, SA-1B's sa_000138.tar in its photos/)"),
    "retrieval": Benchmark(RECOGNITION, ("image_retrieval_recall@1", "text_retrieval_recall@1"),
                           ("flickr30k/dataset_flickr30k.json",),
                           "flickr30k/dataset_flickr30k.json (Karpathy's caption_datasets.zip) + "
                           "flickr30k/flickr30k-images/ (flickr30k-images.tar.gz unpacked; or images/)"),
    "coco_retrieval": Benchmark(RECOGNITION, ("image_retrieval_recall@1", "text_retrieval_recall@1"),
                                ("coco/dataset_coco.json",),
                                "coco/dataset_coco.json (Karpathy's caption_datasets.zip) + coco/val2014/ (COCO's "
                                "val2014.zip unzipped in coco/): the Karpathy 5k test split",
                                module="retrieval", reader="load_coco_root"),
    "zeroshot": Benchmark(RECOGNITION, ("acc1 (mean over datasets)",), ("zeroshot/*/",),
                          "zeroshot/<dataset>/test/<class>/ (+ classnames.txt, templates.txt; else clip_benchmark's)"),
    "linear_probe": Benchmark(RECOGNITION, ("top1",), ("imagenet/train/",), "imagenet/{train,val}/<class>/ "
                              "(ImageFolder; not ImageNet's own archives)", reader="load_imagenet_root"),
    "coco_probe": Benchmark(RECOGNITION, ("mAP",), ("coco/annotations/instances_train2017.json",),
                            "coco/annotations/instances_{train,val}2017.json + coco/{train,val}2017/",
                            module="linear_probe", reader="load_coco_root"),
    "vtab": Benchmark(RECOGNITION, ("M.Avg",), ("vtab/*/",),
                      "vtab/<task>/{train,test}/<class>/ or a clip_benchmark dataset root per task"),
}


def module_of(name: str) -> str:
    """The name of the module in evaluation/benchmarks/ that reads and scores benchmark ``name``."""
    return BENCHMARKS[name].module or name


def benchmark_module(name: str):
    """The module that reads and scores benchmark ``name``, imported on first use (it imports torch)."""
    from importlib import import_module

    return import_module(f"{__package__}.benchmarks.{module_of(name)}")
