"""What an MoE layer keeps for its backward, counted by hand: Megatron-Core's alltoall path with the routing
probabilities applied in the experts' activation (the unpermutation keeps nothing), each norm output held once
however many GEMMs read it, and full recomputation's working set sized by the MoE layer itself."""
import pytest

from simcomm.hardware import build_cluster
from simcomm.parallel import StepModel, TrainingConfig, build_layout, model_preset
from simcomm.parallel.model.config import TransformerConfig
from simcomm.parallel.model.layer import LayerShape, saved_tensors
from simcomm.parallel.model.memory import layer_activation_bytes

H, A, S, E, K, FE, FS = 16, 2, 8, 4, 2, 6, 10
RQ, RKV, DQ, DR, DV = 4, 6, 8, 2, 8


def mla_moe_shape() -> LayerShape:
    c = TransformerConfig(num_layers=1, padded_vocab_size=8, add_bias_linear=False, hidden_size=H,
                          num_attention_heads=A, seq_length=S, swiglu=True, num_moe_experts=E,
                          moe_router_topk=K, moe_ffn_hidden_size=FE, moe_shared_expert_intermediate_size=FS,
                          multi_latent_attention=True, q_lora_rank=RQ, kv_lora_rank=RKV, qk_head_dim=DQ,
                          qk_pos_emb_head_dim=DR, v_head_dim=DV, attention_dropout=0.0, hidden_dropout=0.0)
    return LayerShape(c, 1, 1, False, 1, moe=True)


def test_a_small_mla_moe_layer_saves_what_megatron_core_keeps():
    T, e, R = S, 2, S * K  # one micro-batch of S tokens, bf16, balanced top-K: T K routed rows on the one rank
    want = {"input_norm_input": T * H * e,
            "q_down_input": T * H * e,  # the input norm's output, which kv_down reads too: held once
            "q_norm_input": T * RQ * e, "q_up_input": T * RQ * e,
            "kv_norm_input": T * RKV * e, "kv_up_input": T * RKV * e,
            "query_key_value": T * A * (2 * (DQ + DR) + DV) * e,
            "attention_output": T * A * DV * e, "softmax_logsumexp": T * A * 4,
            "pre_mlp_norm_input": T * H * e,
            "router_input": T * H * e,  # the pre-MLP norm's output, which the shared expert's FC1 reads too
            "router_probs": T * E * 4,
            "moe_fc1_input": R * H * e,
            "moe_activation_input": R * 2 * FE * e, "moe_activation_probs": R * e,  # weighted SwiGLU
            "moe_fc2_input": R * FE * e,
            "shared_activation_input": T * 2 * FS * e, "shared_fc2_input": T * FS * e}
    assert saved_tensors(mla_moe_shape()) == want


def test_fp8_gemms_keep_their_own_copies_of_a_shared_norm_output():
    bf16, fp8 = saved_tensors(mla_moe_shape()), saved_tensors(mla_moe_shape(), fp8=True)
    assert fp8["q_down_input"] == fp8["kv_down_input"] == S * H  # one byte an element, each GEMM its own
    assert fp8["router_input"] == bf16["router_input"] and fp8["shared_fc1_input"] == S * H
    assert "moe_unpermute_input" not in fp8


def test_full_recomputation_reruns_the_moe_layer_when_it_is_the_largest():
    model = model_preset("deepseek-v3", num_layers=4, moe_layer_freq=[0, 1, 1, 1])
    cfg = TrainingConfig(global_batch_size=64, micro_batch_size=1, bf16=True, expert_model_parallel_size=8,
                         moe_grouped_gemm=True, recompute_granularity="full")
    lay = build_layout(model, cfg, 8)
    moe, dense = layer_activation_bytes(lay.moe_layer_shape), layer_activation_bytes(lay.layer_shape)
    assert moe > dense
    mem = StepModel(lay, build_cluster("hgx-h100"), check_memory=False).run().memory[0]
    assert mem.details["transient_detail"]["recompute_working_set"] == pytest.approx(moe)
