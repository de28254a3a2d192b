from ddlbench.methods.grouped import fuse_by_threshold


def test_fusion_threshold_zero_is_one_tensor_per_message():
    assert fuse_by_threshold([4, 8, 12], 0) == [[0], [1], [2]]


def test_a_group_closes_with_the_tensor_that_reaches_the_threshold():
    # the study's rule (and DDP's buckets): 4+4 reaches 8; 4+100 passes it; 4 is left over
    assert fuse_by_threshold([4, 4, 4, 100, 4], 8) == [[0, 1], [2, 3], [4]]
    assert fuse_by_threshold([4, 4, 4], 512 * 2**20) == [[0, 1, 2]]


def test_the_study_bsp_threshold_makes_one_message_even_for_bert_large():
    from omegaconf import OmegaConf

    from ddlbench.config import conf_dir
    from ddlbench.models import on_meta

    threshold = OmegaConf.load(conf_dir() / "method" / "bsp-a2a.yaml").fusion_elems
    numels = [p.numel() for p in on_meta("bert-large").model.parameters()]
    assert sum(numels) > 300e6 and sum(numels) * 4 > threshold  # more bytes than the threshold ...
    assert len(fuse_by_threshold(numels, threshold)) == 1  # ... but fewer elements: one message
