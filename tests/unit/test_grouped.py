from ddlbench.methods.grouped import fuse_by_threshold


def test_fusion_threshold_zero_is_one_tensor_per_message():
    assert fuse_by_threshold([4, 8, 12], 0) == [[0], [1], [2]]


def test_fusion_fills_buffers_up_to_the_threshold_and_big_tensors_go_alone():
    assert fuse_by_threshold([4, 4, 4, 100, 4], 8) == [[0, 1], [2], [3], [4]]
    assert fuse_by_threshold([4, 4, 4], 512 * 2**20) == [[0, 1, 2]]
