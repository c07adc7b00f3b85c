"""The HLO collective parser on hand-written snippets in the formats XLA prints."""
# ruff: noqa: E501  (HLO lines are as long as XLA prints them)

import pytest

from codesign.execute import hlo

CPU_SNIPPET = """
HloModule jit_train, entry_computation_layout={(bf16[256,128]{1,0})->f32[]}

%add.clone (x: f32[], y: f32[]) -> f32[] {
  ROOT %add = f32[] add(f32[] %x, f32[] %y)
}

ENTRY %main.1 (p: bf16[256,128]) -> f32[] {
  %all-reduce.9 = f32[2,32,128]{2,1,0} all-reduce(%convert_bitcast_fusion.13), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, to_apply=%add.clone, metadata={op_name="jit(train)/jvp(GPT)/block0/out/dot_general" stack_frame_id=5}
  %all-reduce.50 = (f32[2,32,128]{2,1,0}, f32[2,32]{1,0}) all-reduce(%a, %b), channel_id=5, replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=%add.clone
  %all-reduce.51 = (f32[64]{0}, /*index=1*/f32[64,2,8]{2,1,0}) all-reduce(%g1, %g2), channel_id=6, replica_groups=mesh['axis_0'=2,'axis_1'=1,'axis_2'=4] {'axis_0'}, use_global_device_ids=true, to_apply=%add.clone
  %reduce-scatter.2 = bf16[2,128]{1,0} reduce-scatter(%x), channel_id=7, replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}, to_apply=%add.clone
  %all-gather.3 = bf16[8,128]{1,0} all-gather(%y), channel_id=8, replica_groups={{0,4},{1,5},{2,6},{3,7}}, dimensions={0}
  %fusion.4 = f32[2,32,128]{2,1,0} fusion(%all-reduce.9), kind=kLoop, calls=%fused
  %all-reduce.8 = f32[] all-reduce(%s), channel_id=13, replica_groups=mesh['axis_0'=4,'axis_1'=1,'axis_2'=2], device_ids=([2,4]T(1,0)) {'axis_0'}, use_global_device_ids=true, to_apply=%add.clone
  ROOT %t = f32[] add(%all-reduce.8, %all-reduce.8)
}
"""

GPU_SNIPPET = """
  all-gather-start.1 = (bf16[2,64]{1,0}, bf16[8,64]{1,0}) all-gather-start(bf16[2,64]{1,0} p.1), channel_id=3, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, use_global_device_ids=true
  all-gather-done.1 = bf16[8,64]{1,0} all-gather-done(all-gather-start.1)
  all-reduce-start.2 = bf16[4096]{0} all-reduce-start(bf16[4096]{0} p.2), channel_id=4, replica_groups={}, to_apply=add
  all-reduce-done.2 = bf16[4096]{0} all-reduce-done(all-reduce-start.2)
  collective-permute-start.3 = (f32[16,8]{1,0}, f32[16,8]{1,0}, u32[], u32[]) collective-permute-start(f32[16,8]{1,0} p.3), channel_id=5, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  collective-permute-done.3 = f32[16,8]{1,0} collective-permute-done(collective-permute-start.3)
  all-to-all.4 = bf16[8,32]{1,0} all-to-all(bf16[8,32]{1,0} p.4), channel_id=6, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}
"""


def test_replica_group_formats():
    assert hlo.parse_replica_groups("{{0,1,2,3},{4,5,6,7}}") == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert hlo.parse_replica_groups("[2,4]<=[8]") == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert hlo.parse_replica_groups("[4,2]<=[2,4]T(1,0)") == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert hlo.parse_replica_groups("[2,4]<=[2,2,2]T(2,1,0)") == ((0, 4, 2, 6), (1, 5, 3, 7))
    assert hlo.parse_replica_groups("mesh['axis_0'=2,'axis_1'=4] {'axis_1'}") == \
        ((0, 1, 2, 3), (4, 5, 6, 7))
    assert hlo.parse_replica_groups("mesh['a'=2,'b'=1,'c'=4] {'a'}") == \
        ((0, 4), (1, 5), (2, 6), (3, 7))
    # the mesh holds iota(8).reshape(2,4).T = [[0,4],[1,5],[2,6],[3,7]] as a 4x1x2 array
    assert hlo.parse_replica_groups(
        "mesh['axis_0'=4,'axis_1'=1,'axis_2'=2], device_ids=([2,4]T(1,0)) {'axis_0'}") == \
        ((0, 1, 2, 3), (4, 5, 6, 7))
    assert hlo.parse_replica_groups("{}", num_devices=4) == ((0, 1, 2, 3),)
    with pytest.raises(ValueError, match="pass num_devices"):
        hlo.parse_replica_groups("{}")
    with pytest.raises(ValueError, match="in no format this parser knows"):
        hlo.parse_replica_groups("<=[8]")
    with pytest.raises(ValueError, match="names axes"):
        hlo.parse_replica_groups("mesh['a'=2] {'b'}")


def test_cpu_module_collectives_bytes_and_axes():
    found = hlo.parse(CPU_SNIPPET)
    assert [c.name for c in found] == ["all-reduce.9", "all-reduce.50", "all-reduce.51",
                                       "reduce-scatter.2", "all-gather.3", "all-reduce.8"]
    ar, combined, grads, rs, ag, scalar = found
    assert ar.bytes == 2 * 32 * 128 * 4 and ar.op_name.endswith("block0/out/dot_general")
    assert [b.elements for b in combined.buffers] == [2 * 32 * 128, 2 * 32]
    assert [b.dims for b in grads.buffers] == [(64,), (64, 2, 8)]
    assert rs.bytes == 2 * 2 * 128 * 2  # nccl size of a reduce-scatter: its whole input (x2)
    assert ag.bytes == 8 * 128 * 2 and ag.group_size == 2  # of an all-gather: its output
    axes, sizes = ("dp", "tp"), (2, 4)
    assert [hlo.attribute(c, axes, sizes) for c in found] == ["tp", "tp", "dp", "dp", "dp",
                                                              "tp"]
    assert hlo.attribute(hlo.parse(GPU_SNIPPET, 8)[-1], axes, sizes) == "dp+tp"


def test_async_start_forms_count_once():
    found = hlo.parse(GPU_SNIPPET, num_devices=8)
    assert [c.kind for c in found] == ["all-gather", "all-reduce", "collective-permute",
                                       "all-to-all"]
    gather, reduce, permute, a2a = found
    assert gather.buffers == (hlo.Buffer("bf16", (8, 64)),)  # the output half of the tuple
    assert reduce.groups == (tuple(range(8)),) and reduce.bytes == 4096 * 2
    assert permute.groups == ((0, 1), (1, 2), (2, 3), (3, 0)) and permute.bytes == 16 * 8 * 4
    assert hlo.attribute(permute, ("pp",), (4,)) == "pp"
    assert a2a.bytes == 8 * 32 * 2


def test_attribute_rejects_ids_outside_the_mesh():
    c = hlo.parse(CPU_SNIPPET)[0]
    with pytest.raises(ValueError, match="exceed the mesh of 4"):
        hlo.attribute(c, ("tp",), (4,))
