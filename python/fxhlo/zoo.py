"""The model zoo: reduced real models from the libraries users have (transformers from configs
with seeded random weights, torchvision with ``weights=None``), run through both of fxhlo's
paths and compared with eager (docs/zoo.md is generated from a run; issue 35).

    python -m fxhlo.zoo [--models gpt2,resnet50] [--paths infer,train] [--jobs 2]
                        [--out results.json] [--table docs/zoo.md] [--timeout 300]

Paths (each model lists those that apply to it):

* ``export``: ``torch.export.export(...).run_decompositions(fxhlo.decomp.export_decompositions())``
  (torch's default table plus the static-shape decompositions of library ops such as
  transformers' ``grouped_mm_fallback``) -> ``torch.export.save`` (.pt2)
  -> ``fxhlo compile --stats`` -> ``fxhlo run`` (the CLI at ``$FXHLO_BIN``), against eager,
  f32 rtol/atol 1e-4.
* ``infer``: ``torch.compile(backend="fxhlo")`` under ``torch.no_grad()``, rtol/atol 1e-4.
* ``train``: one training step (outputs dotted with fixed random weights, ``backward``): the
  loss and every parameter's gradient against eager, rtol 1e-3 atol 1e-4.  Models marked
  ``ill_conditioned`` (batch-norm CNNs in train mode at a tiny batch, whose f32 gradients differ
  from float64 ones by up to several percent, eager's too) are judged against a float64 eager
  run where gradients miss eager's tolerance: the relative L2 error of all of fxhlo's
  gradients against it may be at most ``F64_FACTOR`` times eager's.
* ``dynamic``: one compiled model called with three input shapes in turn, each against eager.
* ``bf16``: the model and its float inputs in bfloat16, compiled, judged against a float64
  eager run: fxhlo's largest error against it at most ``F64_FACTOR`` times eager's bf16 error,
  or within bf16's tolerance (rtol 2e-2, atol 1e-2) of it.
* ``gen_dynamic`` / ``gen_static`` (causal LMs): ``model.generate`` of ``GEN_TOKENS`` greedy
  tokens with the model's KV cache (``DynamicCache``; ``cache_implementation="static"``), the
  model's forward compiled: the tokens must be eager's.

Each model x path runs in a pool of worker processes (``--jobs``): a crash or a timeout is
recorded, not fatal.  Each result records its status (``pass``, ``mismatch`` with the largest
error, ``error`` with the first line, ``timeout``, ``crash``, ``skipped: reason``), the steps
run on the reference interpreter and the steps in all (``fxhlo.stats()``, or ``fxhlo compile
--stats`` on the export path), the eager partitions and the time.  The expected failures are
``fxhlo.zoo_xfail.XFAIL``; ``verdict`` compares a result with that list.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

PATHS = ["export", "infer", "train", "dynamic", "bf16", "gen_dynamic", "gen_static"]
RTOL, ATOL = 1e-4, 1e-4  # f32 outputs
GRAD_RTOL, GRAD_ATOL = 1e-3, 1e-4  # f32 gradients
BF16_RTOL, BF16_ATOL = 2e-2, 1e-2  # bf16 outputs against float64
F64_FACTOR = 2.0  # fxhlo's error against float64 at most this times eager's
GEN_TOKENS = 6
MARK = "@@fxhlo-zoo@@ "


@dataclass
class Model:
    """One zoo entry.  ``build()`` returns the module (seeded); ``inputs(i)`` the positional
    input tensors of shape set ``i`` (0 is the main one; 1 and 2 are the dynamic path's other
    shapes), seeded.  The module's forward returns a tensor or a tuple of tensors."""

    name: str
    family: str
    library: str
    reduction: str
    build: Callable[[], Any]
    inputs: Callable[[int], tuple]
    paths: List[str]
    #: training gradients are judged against float64 where they miss eager's tolerance
    ill_conditioned: bool = False
    #: causal LMs: ``build()`` wraps the Hugging Face model as ``.m`` (generation uses it)
    hf: bool = False
    #: paths that cannot run for a reason outside fxhlo: path -> reason (recorded as skipped)
    skip: Dict[str, str] = field(default_factory=dict)
    notes: str = ""


# ------------------------------------------------------------------------------ helpers

def _torch():
    import torch
    return torch


def _no_dropout(module):
    """Zero every dropout / stochastic depth probability so that train mode is deterministic."""
    torch = _torch()
    for m in module.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.p = 0.0
        if type(m).__name__ == "StochasticDepth":
            m.p = 0.0
    return module


def _gen(i: int):
    return _torch().Generator().manual_seed(1000 + i)


def _ids(batch, seq, vocab, i):
    return _torch().randint(3, vocab, (batch, seq), generator=_gen(i))


def _image(batch, c, h, w, i):
    return _torch().randn(batch, c, h, w, generator=_gen(i))


def _wrap(fn_name: str, model, pick: Callable):
    """A module whose forward calls ``model`` and returns ``pick(out)`` (tensors only)."""
    torch = _torch()

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, *args):
            return pick(self.m, *args)

    Wrapper.__name__ = fn_name
    Wrapper.__qualname__ = fn_name
    return Wrapper()


HF_IDS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
HF_NO_DROPOUT = dict(attention_dropout=0.0)
VOCAB = 128
LM_SHAPES = [(2, 8), (2, 12), (1, 5)]  # (batch, sequence) of the three shape sets
ENC_SHAPES = [(2, 8), (3, 10), (1, 6)]
IMG_SHAPES = [(2, 64), (1, 96), (3, 48)]  # (batch, square resolution)


def _lm(name, family, cfg_fn, cls_name, reduction, bf16=False, extra_paths=()):
    def build():
        import transformers
        torch = _torch()
        torch.manual_seed(0)
        cfg = cfg_fn(transformers)
        m = _no_dropout(getattr(transformers, cls_name)(cfg))
        return _wrap(name, m, lambda m, ids: m(input_ids=ids, use_cache=False).logits)

    def inputs(i):
        b, t = LM_SHAPES[i]
        return (_ids(b, t, VOCAB, i),)

    paths = ["export", "infer", "train", "dynamic", "gen_dynamic", "gen_static"]
    if bf16:
        paths.append("bf16")
    return Model(name, family, "transformers", reduction, build, inputs, paths + list(extra_paths),
                 hf=True)


def _llama_like(cls_cfg, **over):
    base = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                max_position_embeddings=64, **HF_IDS)
    base.update(over)
    return lambda t: getattr(t, cls_cfg)(**base)


LM_RED = ("2 layers, hidden 64, 4 heads (2 KV heads), MLP 128, vocab 128; batch 2 x 8 tokens")


def _models() -> List[Model]:
    ms: List[Model] = []
    # ----------------------------------------------------------------- causal LMs
    ms.append(_lm("gpt2", "causal LM", lambda t: t.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, n_positions=64, vocab_size=VOCAB, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, **HF_IDS), "GPT2LMHeadModel",
        "2 layers, hidden 64, 2 heads, vocab 128, 64 positions; batch 2 x 8 tokens", bf16=True))
    ms.append(_lm("llama", "causal LM", _llama_like("LlamaConfig"), "LlamaForCausalLM",
                  LM_RED, bf16=True))
    ms.append(_lm("qwen2", "causal LM", _llama_like("Qwen2Config"), "Qwen2ForCausalLM", LM_RED))
    ms.append(_lm("qwen3", "causal LM", _llama_like("Qwen3Config", head_dim=16),
                  "Qwen3ForCausalLM", LM_RED + "; head_dim 16"))
    ms.append(_lm("mistral", "causal LM", _llama_like("MistralConfig", sliding_window=None),
                  "MistralForCausalLM", LM_RED))
    ms.append(_lm("phi3", "causal LM", _llama_like("Phi3Config", pad_token_id=0),
                  "Phi3ForCausalLM", LM_RED))
    ms.append(_lm("gemma", "causal LM", _llama_like("GemmaConfig", head_dim=16),
                  "GemmaForCausalLM", LM_RED + "; head_dim 16"))
    ms.append(_lm("gemma3", "causal LM", _llama_like(
        "Gemma3TextConfig", head_dim=16, sliding_window=4, layer_types=None,
        query_pre_attn_scalar=16), "Gemma3ForCausalLM",
        LM_RED + "; head_dim 16, sliding window 4"))
    moe = dict(num_experts_per_tok=2)
    ms.append(_lm("mixtral", "MoE causal LM", _llama_like(
        "MixtralConfig", num_local_experts=4, **moe), "MixtralForCausalLM",
        LM_RED + "; 4 experts, top 2"))
    ms.append(_lm("qwen2_moe", "MoE causal LM", _llama_like(
        "Qwen2MoeConfig", num_experts=4, moe_intermediate_size=32,
        shared_expert_intermediate_size=64, **moe), "Qwen2MoeForCausalLM",
        LM_RED + "; 4 experts (MLP 32), top 2, shared expert MLP 64"))

    # ----------------------------------------------------------------- encoders
    def encoder(name, cfg_fn, cls_name, reduction, bf16=False):
        def build():
            import transformers
            torch = _torch()
            torch.manual_seed(0)
            m = getattr(transformers, cls_name)(cfg_fn(transformers))
            _no_dropout(m)
            return _wrap(name, m, lambda m, ids, mask: m(input_ids=ids, attention_mask=mask)
                         .last_hidden_state)

        def inputs(i):
            torch = _torch()
            b, t = ENC_SHAPES[i]
            mask = torch.ones(b, t, dtype=torch.long)
            mask[0, t - 2:] = 0  # padding in the first sequence
            return (_ids(b, t, VOCAB, i), mask)
        paths = ["export", "infer", "train", "dynamic"] + (["bf16"] if bf16 else [])
        return Model(name, "encoder", "transformers", reduction, build, inputs, paths)

    enc = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
               vocab_size=VOCAB, max_position_embeddings=64, hidden_dropout_prob=0.0,
               attention_probs_dropout_prob=0.0)
    ENC_RED = "2 layers, hidden 64, 4 heads, MLP 128, vocab 128; batch 2 x 8 tokens, padded"
    ms.append(encoder("bert", lambda t: t.BertConfig(**enc), "BertModel", ENC_RED, bf16=True))
    ms.append(encoder("roberta", lambda t: t.RobertaConfig(pad_token_id=1, **enc), "RobertaModel",
                      ENC_RED))
    ms.append(encoder("distilbert", lambda t: t.DistilBertConfig(
        n_layers=2, dim=64, n_heads=4, hidden_dim=128, vocab_size=VOCAB,
        max_position_embeddings=64, dropout=0.0, attention_dropout=0.0), "DistilBertModel",
        ENC_RED))

    # ----------------------------------------------------------------- encoder-decoders
    def seq2seq(name, cfg_fn, cls_name, reduction):
        def build():
            import transformers
            torch = _torch()
            torch.manual_seed(0)
            m = getattr(transformers, cls_name)(cfg_fn(transformers))
            _no_dropout(m)
            return _wrap(name, m, lambda m, ids, dec: m(input_ids=ids, decoder_input_ids=dec,
                                                        use_cache=False).logits)

        def inputs(i):
            b, t = ENC_SHAPES[i]
            return (_ids(b, t, VOCAB, i), _ids(b, max(2, t // 2), VOCAB, 50 + i))
        return Model(name, "encoder-decoder", "transformers", reduction, build, inputs,
                     ["export", "infer", "train", "dynamic"])

    ms.append(seq2seq("t5", lambda t: t.T5Config(
        vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
        num_heads=4, dropout_rate=0.0, decoder_start_token_id=0, **HF_IDS),
        "T5ForConditionalGeneration",
        "2+2 layers, d_model 64, 4 heads, FF 128, vocab 128; batch 2 x 8 -> 4 tokens"))
    ms.append(seq2seq("bart", lambda t: t.BartConfig(
        vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, decoder_start_token_id=2, forced_eos_token_id=None, **HF_IDS),
        "BartForConditionalGeneration",
        "2+2 layers, d_model 64, 4 heads, FF 128, vocab 128; batch 2 x 8 -> 4 tokens"))

    # ----------------------------------------------------------------- vision/audio transformers
    def hf_vision(name, family, cfg_fn, cls_name, reduction, pick, make_inputs, paths):
        def build():
            import transformers
            torch = _torch()
            torch.manual_seed(0)
            m = getattr(transformers, cls_name)(cfg_fn(transformers))
            _no_dropout(m)
            return _wrap(name, m, pick)
        return Model(name, family, "transformers", reduction, build, make_inputs, paths)

    vit_shapes = [(2, 32), (1, 48), (3, 16)]
    ms.append(hf_vision("vit", "vision transformer", lambda t: t.ViTConfig(
        image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=128, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0), "ViTModel",
        "2 layers, hidden 64, 4 heads, MLP 128, patch 8; batch 2 x 3 x 32 x 32 (dynamic: other"
        " resolutions with interpolate_pos_encoding)",
        lambda m, x: m(pixel_values=x, interpolate_pos_encoding=True).last_hidden_state,
        lambda i: (_image(vit_shapes[i][0], 3, vit_shapes[i][1], vit_shapes[i][1], i),),
        ["export", "infer", "train", "dynamic", "bf16"]))

    def clip_cfg(t):
        text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, max_position_embeddings=32, **HF_IDS)
        vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, image_size=32, patch_size=8)
        return t.CLIPConfig(text_config=text, vision_config=vision, projection_dim=32)

    def clip_inputs(i):
        b, t = [(2, 7), (3, 9), (1, 5)][i]
        return (_ids(b, t, VOCAB, i), _image(b, 3, 32, 32, i))
    ms.append(hf_vision("clip", "text+vision transformer", clip_cfg, "CLIPModel",
                        "text and vision towers of 2 layers, hidden 64, 4 heads, MLP 128, "
                        "projection 32; batch 2: 7 tokens and 3 x 32 x 32 images",
                        lambda m, ids, px: (lambda o: (o.logits_per_image, o.text_embeds,
                                                        o.image_embeds))(
                            m(input_ids=ids, pixel_values=px)),
                        clip_inputs, ["export", "infer", "train", "dynamic"]))

    def whisper_cfg(t):
        return t.WhisperConfig(
            d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
            num_mel_bins=16, max_source_positions=32, max_target_positions=32,
            vocab_size=VOCAB, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
            decoder_start_token_id=1, **HF_IDS)

    def whisper_build():
        import transformers
        torch = _torch()
        torch.manual_seed(0)
        enc = transformers.WhisperModel(whisper_cfg(transformers)).get_encoder()
        _no_dropout(enc)
        return _wrap("whisper_encoder", enc, lambda m, x: m(x).last_hidden_state)
    ms.append(Model("whisper_encoder", "audio transformer", "transformers",
                    "encoder only: 2 layers, d_model 64, 4 heads, FF 128, 16 mel bins, "
                    "32 positions; batch 1-3 x 16 x 64 frames (the length is fixed by the "
                    "positions: the dynamic path changes the batch)",
                    whisper_build,
                    lambda i: (_torch().randn([1, 2, 3][i], 16, 64, generator=_gen(i)),),
                    ["export", "infer", "train", "dynamic"]))

    ms.append(hf_vision("wav2vec2", "audio transformer", lambda t: t.Wav2Vec2Config(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, conv_dim=(32, 32, 32), conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
        hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0,
        layerdrop=0.0, mask_time_prob=0.0, do_stable_layer_norm=False), "Wav2Vec2Model",
        "feature extractor of 3 convs (32 channels), 2 layers, hidden 64, 4 heads, FF 128; "
        "batch 2 x 800 samples",
        lambda m, x: m(input_values=x).last_hidden_state,
        lambda i: (_torch().randn([2, 1, 3][i], [800, 1200, 640][i], generator=_gen(i)),),
        ["export", "infer", "train", "dynamic"]))

    # ----------------------------------------------------------------- torchvision
    def tv(name, family, make, reduction, shapes=IMG_SHAPES, paths=None, bn=True, bf16=False,
           pick=None, channels=3):
        def build():
            torch = _torch()
            torch.manual_seed(0)
            m = _no_dropout(make())
            if pick is not None:
                return _wrap(name, m, pick)
            return m

        def inputs(i):
            b, r = shapes[i]
            return (_image(b, channels, r, r, i),)
        p = paths or (["export", "infer", "train", "dynamic"] + (["bf16"] if bf16 else []))
        return Model(name, family, "torchvision", reduction, build, inputs, p,
                     ill_conditioned=bn)

    def tvm():
        import torchvision
        return torchvision.models

    ms.append(tv("resnet50", "CNN", lambda: tvm().resnet50(weights=None, num_classes=10),
                 "full depth and width, 10 classes; batch 2 x 3 x 64 x 64"))
    ms.append(tv("mobilenet_v3", "CNN",
                 lambda: tvm().mobilenet_v3_large(weights=None, num_classes=10),
                 "mobilenet_v3_large, full depth and width, 10 classes; batch 2 x 3 x 64 x 64",
                 bf16=True))
    ms.append(tv("efficientnet", "CNN",
                 lambda: tvm().efficientnet_b0(weights=None, num_classes=10),
                 "efficientnet_b0, full depth and width, 10 classes; batch 2 x 3 x 64 x 64"))

    def convnext():
        from torchvision.models.convnext import CNBlockConfig, ConvNeXt
        cfg = [CNBlockConfig(24, 48, 1), CNBlockConfig(48, 96, 1), CNBlockConfig(96, 192, 2),
               CNBlockConfig(192, None, 1)]
        return ConvNeXt(cfg, stochastic_depth_prob=0.0, num_classes=10)
    ms.append(tv("convnext", "CNN", convnext,
                 "ConvNeXt blocks (1, 1, 2, 1) of widths 24-192 (tiny: (3, 3, 9, 3) of "
                 "96-768), 10 classes; batch 2 x 3 x 64 x 64", bn=False))
    ms.append(tv("regnet", "CNN", lambda: tvm().regnet_y_400mf(weights=None, num_classes=10),
                 "regnet_y_400mf, full, 10 classes; batch 2 x 3 x 64 x 64"))
    ms.append(tv("densenet", "CNN", lambda: __import__(
        "torchvision.models.densenet", fromlist=["DenseNet"]).DenseNet(
        growth_rate=12, block_config=(2, 2, 2, 2), num_init_features=16, bn_size=2,
        num_classes=10),
        "DenseNet growth 12, blocks (2, 2, 2, 2), 16 initial features (densenet121: 32, "
        "(6, 12, 24, 16), 64), 10 classes; batch 2 x 3 x 64 x 64"))
    ms.append(tv("shufflenet", "CNN",
                 lambda: tvm().shufflenet_v2_x0_5(weights=None, num_classes=10),
                 "shufflenet_v2_x0_5, full, 10 classes; batch 2 x 3 x 64 x 64"))
    ms.append(tv("squeezenet", "CNN",
                 lambda: tvm().squeezenet1_1(weights=None, num_classes=10),
                 "squeezenet1_1, full, 10 classes; batch 2 x 3 x 64 x 64"))

    def swin():
        from torchvision.models.swin_transformer import SwinTransformer
        return SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2, 2, 2],
                               num_heads=[1, 2, 4, 8], window_size=[4, 4],
                               stochastic_depth_prob=0.0, num_classes=10)
    ms.append(tv("swin", "vision transformer", swin,
                 "Swin embed 32, depths (2, 2, 2, 2), heads (1, 2, 4, 8), window 4 (swin_t: 96, "
                 "(2, 2, 6, 2), window 7), 10 classes; batch 2 x 3 x 64 x 64",
                 shapes=[(2, 64), (1, 96), (3, 64)], bn=False))

    def maxvit():
        from torchvision.models.maxvit import MaxVit
        return MaxVit(input_size=(64, 64), stem_channels=16, partition_size=4,
                      block_channels=[32, 64], block_layers=[1, 1], head_dim=16,
                      stochastic_depth_prob=0.0, num_classes=10)
    ms.append(tv("maxvit", "vision transformer", maxvit,
                 "MaxViT stem 16, 2 stages of 1 block (32, 64 channels), head dim 16, "
                 "partition 4 (maxvit_t: 4 stages (2, 2, 5, 2), 64-512), 10 classes; "
                 "batch 2 x 3 x 64 x 64 (the resolution is fixed: the dynamic path changes "
                 "the batch)", shapes=[(2, 64), (1, 64), (3, 64)]))
    ms.append(tv("deeplabv3", "segmentation", lambda: __import__(
        "torchvision.models.segmentation", fromlist=["x"]).deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=4, aux_loss=False),
        "deeplabv3_mobilenet_v3_large, full, 4 classes; batch 2 x 3 x 64 x 64",
        pick=lambda m, x: m(x)["out"]))

    def raft_inputs(i):
        b, h, w = [(1, 128, 128), (2, 128, 128), (1, 128, 160)][i]
        return (_image(b, 3, h, w, i), _image(b, 3, h, w, 10 + i))
    ms.append(Model(
        "raft_small", "optical flow", "torchvision",
        "raft_small, full, 3 flow updates (default 12); batch 1 x 3 x 128 x 128 pairs (its "
        "least size)",
        lambda: _wrap("raft_small", _no_dropout(
            (_torch().manual_seed(0), tvm().optical_flow.raft_small(weights=None))[1]),
            lambda m, a, b: m(a, b, num_flow_updates=3)[-1]),
        raft_inputs, ["export", "infer", "train", "dynamic"]))

    def fcos_build():
        torch = _torch()
        torch.manual_seed(0)
        from torchvision.models.detection import fcos_resnet50_fpn
        m = fcos_resnet50_fpn(weights=None, weights_backbone=None, num_classes=3, min_size=64,
                              max_size=64, score_thresh=0.05, detections_per_img=10)

        def pick(m, x):
            d = m(list(x))
            return tuple(t for r in d for t in (r["boxes"], r["scores"], r["labels"]))
        return _wrap("fcos", m, pick)
    ms.append(Model(
        "fcos", "detection", "torchvision",
        "fcos_resnet50_fpn, 3 classes, images resized to 64 (default 800), at most 10 "
        "detections per image; batch 2 x 3 x 64 x 64; inference only (training needs targets)",
        fcos_build, lambda i: (_image([2, 1, 3][i], 3, 64, [64, 80, 48][i], i).clamp(0, 1),),
        ["export", "infer", "dynamic"],
        skip={"export": "torch.export cannot export the detection post-processing (boxes "
                        "filtered by score: data-dependent shapes, GuardOnDataDependentSymNode)"}))
    return ms


_MODELS: Optional[Dict[str, Model]] = None


def models() -> Dict[str, Model]:
    """The zoo, by name, in the table's order."""
    global _MODELS
    if _MODELS is None:
        _MODELS = {m.name: m for m in _models()}
    return _MODELS


# ------------------------------------------------------------------------------ comparing

class Mismatch(Exception):
    def __init__(self, msg, err):
        super().__init__(msg)
        self.err = err


def flat_tensors(out) -> List[Any]:
    """The tensors of a (nested) output, in order."""
    torch = _torch()
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flat_tensors(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in flat_tensors(o)]
    if hasattr(out, "to_tuple"):
        return flat_tensors(out.to_tuple())
    return []


def max_err(got, want) -> float:
    torch = _torch()
    if got.shape != want.shape:
        raise Mismatch(f"shape {list(got.shape)} vs eager {list(want.shape)}", float("inf"))
    if not want.dtype.is_floating_point:
        return 0.0 if torch.equal(got, want) else float("inf")
    if got.numel() == 0:
        return 0.0
    d = (got.double() - want.double()).abs()
    d = torch.where(torch.isnan(got) & torch.isnan(want), torch.zeros_like(d), d)
    return float(d.max())


def excess(got, want, rtol, atol) -> float:
    """The largest ``|got - want| / (atol + rtol * |want|)``: at most 1 when close."""
    torch = _torch()
    if got.shape != want.shape:
        raise Mismatch(f"shape {list(got.shape)} vs eager {list(want.shape)}", float("inf"))
    if got.dtype != want.dtype:
        raise Mismatch(f"dtype {got.dtype} vs eager {want.dtype}", float("inf"))
    if not want.dtype.is_floating_point:
        return 0.0 if torch.equal(got, want) else float("inf")
    if got.numel() == 0:
        return 0.0
    g, w = got.double(), want.double()
    both_nan = torch.isnan(g) & torch.isnan(w)
    d = (g - w).abs() / (atol + rtol * w.abs())
    d = torch.where(both_nan, torch.zeros_like(d), d)
    d = torch.where(torch.isnan(d), torch.full_like(d, float("inf")), d)
    return float(d.max())


def compare(got, want, rtol=RTOL, atol=ATOL, what="output") -> float:
    """Raises Mismatch unless every tensor of ``got`` is close to ``want``'s; returns the
    largest absolute error."""
    g, w = flat_tensors(got), flat_tensors(want)
    if len(g) != len(w):
        raise Mismatch(f"{len(g)} {what}s vs eager {len(w)}", float("inf"))
    worst = 0.0
    for i, (a, b) in enumerate(zip(g, w)):
        e = max_err(a, b)
        worst = max(worst, e)
        if excess(a, b, rtol, atol) > 1:
            raise Mismatch(f"{what} {i}: max abs err {e:.3g} (rtol {rtol}, atol {atol})", e)
    return worst


# ------------------------------------------------------------------------------ the paths

def _seed_like(t, i):
    torch = _torch()
    return torch.randn(t.shape, generator=torch.Generator().manual_seed(77 + i),
                       dtype=torch.float64).to(t.dtype) if t.dtype.is_floating_point else None


def _loss(out, weights=None):
    """Sum of each floating output dotted with a fixed random tensor (returns the weights)."""
    ts = [t for t in flat_tensors(out) if t.dtype.is_floating_point]
    if weights is None:
        weights = [_seed_like(t.detach().float(), i) for i, t in enumerate(ts)]
    total = 0
    for t, w in zip(ts, weights):
        total = total + (t * w.to(t.dtype)).sum()
    return total, weights


def _stats():
    from .runner import STATS
    gs = list(STATS.graphs.values())
    reasons: Dict[str, int] = {}
    for g in gs:
        for r, n in g.fallback_reasons.items():
            reasons[r] = reasons.get(r, 0) + n
    eager_ops: Dict[str, int] = {}
    for g in gs:
        for r, n in g.eager_ops.items():
            eager_ops[r] = eager_ops.get(r, 0) + n
    return dict(graphs=len(gs), steps=sum(g.steps for g in gs),
                fallback_steps=sum(g.fallback_steps for g in gs),
                eager_partitions=sum(g.eager_partitions for g in gs),
                compiled_partitions=sum(g.compiled_partitions for g in gs),
                fallback_reasons=reasons, eager_ops=eager_ops,
                eager_reasons=sorted({r.split("\n")[0][:300] for g in gs
                                      for r in g.eager_reasons}),
                symbolic_graphs=STATS.symbolic_graphs, specializations=STATS.specializations)


def _compile(f):
    torch = _torch()
    from torch._dynamo import list_backends
    if "fxhlo" in list_backends():
        return torch.compile(f, backend="fxhlo")
    from .backend import fxhlo_backend  # running from a checkout without the entry point
    return torch.compile(f, backend=fxhlo_backend)


def fxhlo_bin() -> Optional[str]:
    b = os.environ.get("FXHLO_BIN")
    if b and os.path.exists(b):
        return b
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for kind in ("release", "debug"):
        p = os.path.join(repo, "target", kind, "fxhlo")
        if os.path.exists(p):
            return p
    return shutil.which("fxhlo")


class Skip(Exception):
    pass


def path_export(m: Model, res: Dict[str, Any]) -> None:
    torch = _torch()
    from safetensors.torch import load_file, save_file
    exe = fxhlo_bin()
    if exe is None:
        raise Skip("no fxhlo binary ($FXHLO_BIN)")
    model = m.build().eval()
    inputs = m.inputs(0)
    with torch.no_grad():
        want = model(*inputs)
    from .decomp import export_decompositions
    ep = torch.export.export(model, inputs).run_decompositions(export_decompositions())
    with tempfile.TemporaryDirectory() as tmp:
        pt2 = os.path.join(tmp, "m.pt2")
        torch.export.save(ep, pt2)
        names = ep.graph_signature.user_inputs
        save_file({n: t.contiguous() for n, t in zip(names, inputs)},
                  os.path.join(tmp, "in.safetensors"))
        fxa = os.path.join(tmp, "m.fxa")
        p = subprocess.run([exe, "compile", pt2, "-o", fxa, "--stats"], capture_output=True,
                           text=True)
        if p.returncode != 0:
            raise RuntimeError("fxhlo compile: " + _first_line(p.stderr or p.stdout))
        mt = re.search(r"-> (\d+) steps", p.stderr)
        mf = re.search(r"fallbacks to the reference interpreter: (\d+)", p.stderr)
        res["steps"] = int(mt.group(1)) if mt else None
        res["fallback_steps"] = int(mf.group(1)) if mf else None
        reasons: Dict[str, int] = {}
        if mf:
            for line in p.stderr.split("fallbacks to the reference interpreter:")[1] \
                    .splitlines()[1:]:
                if not line.startswith("  "):
                    break
                why = line.strip().split(": ", 1)[-1]
                reasons[why] = reasons.get(why, 0) + 1
        res["fallback_reasons"] = reasons
        out = os.path.join(tmp, "out.safetensors")
        p = subprocess.run([exe, "run", fxa, "--inputs", os.path.join(tmp, "in.safetensors"),
                            "--out", out], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError("fxhlo run: " + _first_line(p.stderr or p.stdout))
        got_d = load_file(out)
    got = [got_d[f"output{i}"] for i in range(len(got_d))]
    res["max_err"] = compare(got, flat_tensors(want))


def path_infer(m: Model, res: Dict[str, Any]) -> None:
    torch = _torch()
    model = m.build().eval()
    inputs = m.inputs(0)
    with torch.no_grad():
        want = model(*inputs)
        got = _compile(model)(*inputs)
    res.update(_stats())
    res["max_err"] = compare(got, want)


def _grads(model):
    return {n: p.grad for n, p in model.named_parameters() if p.requires_grad}


def _grads64(m: Model, inputs, w):
    """The gradients of a float64 eager training step (float64 the default dtype meanwhile,
    for the tensors a model makes itself, e.g. RAFT's coordinate grids)."""
    torch = _torch()
    ref64 = m.build().train().double()  # built in f32: the same weights
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        ins64 = [t.double() if t.dtype.is_floating_point else t for t in inputs]
        l64, _ = _loss(ref64(*ins64), [x.double() for x in w])
        l64.backward()
    finally:
        torch.set_default_dtype(old)
    return _grads(ref64)


def path_train(m: Model, res: Dict[str, Any]) -> None:
    torch = _torch()
    model = m.build().train()
    ref = copy.deepcopy(model)
    inputs = m.inputs(0)
    loss_c, w = _loss(_compile(model)(*inputs))
    loss_c.backward()
    res.update(_stats())
    loss_e, _ = _loss(ref(*inputs), w)
    loss_e.backward()
    gc, ge = _grads(model), _grads(ref)
    worst = max_err(loss_c.detach(), loss_e.detach())
    judged_f64 = 0
    off_eager: List[str] = []
    problems = []
    for n in ge:
        a, b = gc[n], ge[n]
        if b is None:
            if a is not None and float(a.abs().max()) != 0:
                problems.append(f"grad of {n}: eager has none")
            continue
        if a is None:
            problems.append(f"grad of {n}: missing")
            continue
        e = max_err(a, b)
        worst = max(worst, e)
        if excess(a, b, GRAD_RTOL, GRAD_ATOL) <= 1:
            continue
        if not m.ill_conditioned:
            problems.append(f"grad of {n}: max abs err {e:.3g}")
            continue
        off_eager.append(n)
    if off_eager:
        # ill-conditioned: all the gradients together against a float64 run, as close to it
        # as eager's (relative L2 norms over every parameter; per tensor, the ratio of two
        # f32 implementations' errors scatters too widely over ~100 tensors to be a test)
        g64 = _grads64(m, inputs, w)
        names = [n for n in ge if ge[n] is not None and gc.get(n) is not None]
        ref_n = sum(float(g64[n].square().sum()) for n in names) ** 0.5 or 1.0
        e_fx = sum(float((gc[n].double() - g64[n]).square().sum()) for n in names) ** 0.5
        e_ea = sum(float((ge[n].double() - g64[n]).square().sum()) for n in names) ** 0.5
        res["rel_err_vs_f64"] = e_fx / ref_n
        res["eager_rel_err_vs_f64"] = e_ea / ref_n
        judged_f64 = len(off_eager)
        if e_fx > F64_FACTOR * e_ea:
            problems.append(f"{len(off_eager)} gradients off eager's tolerance (first "
                            f"{off_eager[0]}); all gradients' relative error vs float64 "
                            f"{e_fx / ref_n:.3g} > {F64_FACTOR} x eager's {e_ea / ref_n:.3g}")
    res["max_err"] = worst
    if judged_f64:
        res["judged_against_f64"] = judged_f64
    if excess(loss_c.detach(), loss_e.detach(), GRAD_RTOL, GRAD_ATOL) > 1:
        problems.insert(0, f"loss {float(loss_c):.6g} vs eager {float(loss_e):.6g}")
    if problems:
        raise Mismatch(f"{len(problems)} mismatches, first: {problems[0]}", worst)


def path_dynamic(m: Model, res: Dict[str, Any]) -> None:
    torch = _torch()
    model = m.build().eval()
    cm = _compile(model)
    worst = 0.0
    with torch.no_grad():
        for i in range(3):
            inputs = m.inputs(i)
            want = model(*inputs)
            got = cm(*inputs)
            try:
                worst = max(worst, compare(got, want))
            except Mismatch as e:
                raise Mismatch(f"shape set {i}: {e}", e.err)
    res.update(_stats())
    res["max_err"] = worst


def path_bf16(m: Model, res: Dict[str, Any]) -> None:
    torch = _torch()
    base = m.build().eval()
    inputs = m.inputs(0)

    def cast(ts, dt):
        return [t.to(dt) if t.dtype.is_floating_point else t for t in ts]
    model = copy.deepcopy(base).to(torch.bfloat16)
    with torch.no_grad():
        ref = flat_tensors(copy.deepcopy(base).double()(*cast(inputs, torch.float64)))
        want = flat_tensors(model(*cast(inputs, torch.bfloat16)))
        got = flat_tensors(_compile(model)(*cast(inputs, torch.bfloat16)))
    res.update(_stats())
    if len(got) != len(want):
        raise Mismatch(f"{len(got)} outputs vs eager {len(want)}", float("inf"))
    worst = 0.0
    for i, (g, w, r) in enumerate(zip(got, want, ref)):
        if g.dtype != w.dtype or g.shape != w.shape:
            raise Mismatch(f"output {i}: {g.dtype}{list(g.shape)} vs eager "
                           f"{w.dtype}{list(w.shape)}", float("inf"))
        if not w.dtype.is_floating_point:
            continue
        e_fx, e_eager = max_err(g.double(), r), max_err(w.double(), r)
        worst = max(worst, e_fx)
        if e_fx <= F64_FACTOR * e_eager or excess(g.double(), r, BF16_RTOL, BF16_ATOL) <= 1:
            continue
        raise Mismatch(f"output {i}: err vs float64 {e_fx:.3g} > {F64_FACTOR} x eager's "
                       f"{e_eager:.3g}", e_fx)
    res["max_err"] = worst
    res["eager_err_vs_f64"] = max(max_err(w.double(), r) for w, r in zip(want, ref)
                                  if w.dtype.is_floating_point)


def _generate(m: Model, static: bool, res: Dict[str, Any]) -> None:
    torch = _torch()
    model = m.build().m.eval()
    ids = m.inputs(0)[0]
    kw = dict(max_new_tokens=GEN_TOKENS, do_sample=False, use_cache=True, pad_token_id=0,
              eos_token_id=None, disable_compile=True)
    if static:
        kw["cache_implementation"] = "static"
    with torch.no_grad():
        want = model.generate(ids, **kw)
        model.forward = _compile(model.forward)
        got = model.generate(ids, **kw)
    res.update(_stats())
    if got.shape != want.shape or not torch.equal(got, want):
        n = ids.shape[1]
        diff = (got[:, n:] != want[:, n:]).nonzero() if got.shape == want.shape else None
        where = f"first differing token at {diff[0].tolist()}" if diff is not None and len(diff) \
            else f"shape {list(got.shape)} vs {list(want.shape)}"
        raise Mismatch(f"tokens differ from eager's: {where}", float("inf"))
    res["tokens"] = int(got.shape[1] - ids.shape[1])


PATH_FNS = {
    "export": path_export,
    "infer": path_infer,
    "train": path_train,
    "dynamic": path_dynamic,
    "bf16": path_bf16,
    "gen_dynamic": lambda m, r: _generate(m, False, r),
    "gen_static": lambda m, r: _generate(m, True, r),
}


def _first_line(s: str) -> str:
    for line in (s or "").strip().splitlines():
        line = line.strip()
        if line:
            return line[:400]
    return ""


def run_one(name: str, path: str) -> Dict[str, Any]:
    """Runs one model x path in this process and returns its result record."""
    import gc
    import warnings
    torch = _torch()
    from .runner import STATS
    res: Dict[str, Any] = dict(model=name, path=path)
    t0 = time.perf_counter()
    torch._dynamo.reset()
    STATS.reset()
    try:
        m = models()[name]
        if path not in m.paths:
            raise Skip(f"path does not apply to {name}")
        if path in m.skip:
            raise Skip(m.skip[path])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            PATH_FNS[path](m, res)
        res["status"] = "pass"
    except Skip as e:
        res["status"] = "skipped"
        res["detail"] = str(e)
    except Mismatch as e:
        res.update(_stats_if_missing(res))
        res["status"] = "mismatch"
        res["detail"] = str(e)
        res["max_err"] = e.err
    except Exception as e:  # noqa: BLE001 - recorded
        res.update(_stats_if_missing(res))
        res["status"] = "error"
        res["detail"] = f"{type(e).__name__}: {_first_line(str(e))}"
        res["traceback"] = traceback.format_exc()[-3000:]
    res["time_s"] = round(time.perf_counter() - t0, 2)
    torch._dynamo.reset()
    gc.collect()
    return res


def _stats_if_missing(res):
    if "steps" in res or res.get("path") == "export":
        return {}
    try:
        return _stats()
    except Exception:  # noqa: BLE001
        return {}


# ------------------------------------------------------------------------------ the pool

def worker_main() -> None:
    """A worker: reads ``model path`` lines from stdin, answers one JSON line each."""
    os.environ.setdefault("FXHLO_NUM_THREADS", "1")
    torch = _torch()
    torch.set_num_threads(1)
    out = sys.stdout
    sys.stdout = sys.stderr  # model prints stay out of the protocol
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        name, path = line.split()
        res = run_one(name, path)
        out.write(MARK + json.dumps(res) + "\n")
        out.flush()


class _Worker:
    def __init__(self, env, log_dir, idx):
        self.log = open(os.path.join(log_dir, f"worker{idx}.log"), "ab")
        self.p = subprocess.Popen([sys.executable, "-m", "fxhlo.zoo", "--worker"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.log, env=env)
        self.task: Optional[Tuple[str, str]] = None
        self.t0 = 0.0
        self.buf = b""

    def send(self, task):
        self.task = task
        self.t0 = time.perf_counter()
        self.p.stdin.write(f"{task[0]} {task[1]}\n".encode())
        self.p.stdin.flush()

    def kill(self):
        try:
            self.p.kill()
            self.p.wait(5)
        except Exception:  # noqa: BLE001
            pass
        self.log.close()


def _tail(path, n=3):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4000))
            lines = [x for x in f.read().decode(errors="replace").splitlines() if x.strip()]
        return " | ".join(lines[-n:])[:400]
    except OSError:
        return ""


def run_pool(tasks: Sequence[Tuple[str, str]], jobs: int = 2, timeout: float = 300,
             progress: Optional[Callable[[Dict[str, Any]], None]] = None) -> List[Dict[str, Any]]:
    """Runs the tasks (model, path) in ``jobs`` worker processes; a worker that crashes or
    runs past ``timeout`` seconds on a task is killed (its task recorded) and replaced."""
    env = dict(os.environ)
    env.setdefault("FXHLO_NUM_THREADS", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                    else "")
    log_dir = tempfile.mkdtemp(prefix="fxhlo-zoo-")
    env.setdefault("FXHLO_CACHE_DIR", os.path.join(log_dir, "cache"))
    pending = list(tasks)
    results: Dict[Tuple[str, str], Dict[str, Any]] = {}
    workers: List[Optional[_Worker]] = [None] * max(1, min(jobs, len(pending) or 1))
    nstarted = 0

    def finish(w: _Worker, res):
        results[w.task] = res
        w.task = None
        if progress:
            progress(res)

    try:
        while pending or any(w is not None and w.task for w in workers):
            for i, w in enumerate(workers):
                if pending and (w is None or w.task is None):
                    if w is None:
                        w = workers[i] = _Worker(env, log_dir, nstarted)
                        nstarted += 1
                    w.send(pending.pop(0))
            busy = [w for w in workers if w is not None and w.task]
            r, _, _ = select.select([w.p.stdout for w in busy], [], [], 1.0)
            now = time.perf_counter()
            for w in busy:
                if w.p.stdout in r:
                    chunk = os.read(w.p.stdout.fileno(), 1 << 16)
                    if chunk:
                        w.buf += chunk
                        while b"\n" in w.buf:
                            line, w.buf = w.buf.split(b"\n", 1)
                            s = line.decode(errors="replace")
                            if s.startswith(MARK) and w.task:
                                finish(w, json.loads(s[len(MARK):]))
                        continue
                    # end of file: the worker died
                    code = w.p.wait()
                    finish(w, dict(model=w.task[0], path=w.task[1], status="crash",
                                   detail=f"worker died (exit code {code}): "
                                          f"{_tail(w.log.name)}",
                                   time_s=round(now - w.t0, 2)))
                    w.kill()
                    workers[workers.index(w)] = None
                elif now - w.t0 > timeout:
                    task = w.task
                    w.kill()
                    workers[workers.index(w)] = None
                    w.task = task
                    finish(w, dict(model=task[0], path=task[1], status="timeout",
                                   detail=f"no result in {timeout:.0f} s",
                                   time_s=round(now - w.t0, 2)))
    finally:
        for w in workers:
            if w is not None:
                try:
                    w.p.stdin.close()
                except Exception:  # noqa: BLE001
                    pass
                w.kill()
        shutil.rmtree(log_dir, ignore_errors=True)
    return [results[t] for t in tasks]


# ------------------------------------------------------------------------------ verdicts

def verdict(res: Dict[str, Any]) -> str:
    """``pass``, ``xfail`` (failed, listed), ``skipped``, ``FAIL`` (failed, not listed) or
    ``XPASS`` (passed, listed: the list must shrink); for a cell of
    ``zoo_xfail.MACHINE_DEPENDENT``, ``pass`` or ``xfail`` (a mismatch), else ``FAIL``."""
    from .zoo_xfail import MACHINE_DEPENDENT, XFAIL
    key = (res["model"], res["path"])
    listed = key in XFAIL
    if res["status"] == "skipped":
        return "skipped"
    if key in MACHINE_DEPENDENT:  # a pass or a mismatch, by CPU: see its reason
        return {"pass": "pass", "mismatch": "xfail"}.get(res["status"], "FAIL")
    if res["status"] == "pass":
        return "XPASS" if listed else "pass"
    return "xfail" if listed else "FAIL"


def all_tasks(names=None, paths=None) -> List[Tuple[str, str]]:
    ms = models()
    names = names or list(ms)
    return [(n, p) for n in names for p in PATHS
            if p in ms[n].paths and (not paths or p in paths)]


#: the expensive paths (train, dynamic, bf16, generation) of CI's subset: one model of each
#: family; the cheap paths (export, infer) run for every model
CI_EXPENSIVE = {
    "train": ["gpt2", "llama", "mixtral", "bert", "t5", "vit", "resnet50", "mobilenet_v3",
              "swin"],
    "dynamic": ["llama", "bert", "resnet50"],
    "bf16": ["gpt2", "mobilenet_v3"],
    "gen_dynamic": ["gpt2", "llama", "qwen3"],
    "gen_static": ["llama", "gemma3"],
}


def ci_tasks() -> List[Tuple[str, str]]:
    """What ``python/tests/test_zoo.py`` runs by default: every model's ``export`` and
    ``infer``, and ``CI_EXPENSIVE``'s models on the other paths."""
    return [(n, p) for n, p in all_tasks()
            if p in ("export", "infer") or n in CI_EXPENSIVE.get(p, ())]


# ------------------------------------------------------------------------------ the table

def _cell(r: Optional[Dict[str, Any]]) -> str:
    if r is None:
        return ""
    v = verdict(r)
    if v == "skipped":
        return "skipped"
    fb = r.get("fallback_steps")
    parts = []
    if v == "pass":
        parts.append("pass")
    elif v == "XPASS":
        parts.append("**XPASS**")
    else:
        s = r["status"]
        if s == "mismatch":
            e = r.get("max_err")
            s = f"mismatch {e:.2g}" if isinstance(e, float) and e != float("inf") else "mismatch"
        parts.append(("xfail: " if v == "xfail" else "**FAIL**: ") + s)
    if fb is not None and r.get("steps"):
        parts.append(f"{fb}/{r['steps']} fb")
    if r.get("eager_partitions"):
        parts.append(f"{r['eager_partitions']} eager")
    return " · ".join(parts)


def table(results: List[Dict[str, Any]], command: str, seconds: float, header="") -> str:
    import platform
    torch = _torch()
    vers = [f"torch {torch.__version__}"]
    for lib in ("transformers", "torchvision"):
        try:
            vers.append(f"{lib} {__import__(lib).__version__}")
        except ImportError:
            pass
    from .zoo_xfail import XFAIL
    by = {(r["model"], r["path"]): r for r in results}
    ms = models()
    names = [n for n in ms if any(k[0] == n for k in by)]
    paths = [p for p in PATHS if any(k[1] == p for k in by)]
    counts: Dict[str, int] = {}
    for r in results:
        v = verdict(r)
        counts[v] = counts.get(v, 0) + 1
    L = []
    L.append("# The model zoo")
    L.append("")
    L.append("<!-- generated by `python -m fxhlo.zoo`; do not edit by hand -->")
    L.append("")
    L.append(f"Generated by `{command}` in {seconds / 60:.1f} min ({platform.machine()}, "
             f"{', '.join(vers)}).")
    L.append("")
    if header:
        L.append(header.strip())
        L.append("")
    L.append("Totals: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ".")
    L.append("")
    L.append("## Results")
    L.append("")
    L.append("Each cell: the verdict (`pass`; `xfail: ...`, a failure listed in "
             "`python/fxhlo/zoo_xfail.py`; `**FAIL**`, a failure not listed; `**XPASS**`, a "
             "listed failure that passed), then `N/M fb`: N of the M steps of the compiled "
             "programs ran on the reference interpreter (fallback steps; the export path "
             "counts `fxhlo compile --stats`' program, the others every graph "
             "`torch.compile` handed over, forward and backward for `train`), and `K eager`: "
             "parts of graphs run in eager (eager partitions). An empty cell: the path does not "
             "apply.")
    L.append("")
    L.append("| model | " + " | ".join(paths) + " |")
    L.append("| --- | " + " | ".join("---" for _ in paths) + " |")
    for n in names:
        L.append(f"| {n} | " + " | ".join(_cell(by.get((n, p))) for p in paths) + " |")
    L.append("")
    L.append("## Reductions")
    L.append("")
    L.append("| model | family | library | reduction (of the library's default) |")
    L.append("| --- | --- | --- | --- |")
    for n in names:
        m = ms[n]
        L.append(f"| {n} | {m.family} | {m.library} | {m.reduction} |")
    L.append("")
    from .zoo_xfail import MACHINE_DEPENDENT
    listed = {**XFAIL, **MACHINE_DEPENDENT}
    fails = [r for r in results if verdict(r) in ("xfail", "FAIL")]
    if fails:
        L.append("## Failures")
        L.append("")
        L.append("| model | path | result | listed reason |")
        L.append("| --- | --- | --- | --- |")
        for r in fails:
            d = (r.get("detail") or "").replace("|", "\\|").replace("\n", " ")[:300]
            L.append(f"| {r['model']} | {r['path']} | {r['status']}: {d} | "
                     f"{listed.get((r['model'], r['path']), '**not listed**')} |")
        L.append("")
    L.append("## Fallback steps by reason")
    L.append("")
    L.append("The reasons the reference interpreter ran steps, per model and path, with step "
             "counts (from `fxhlo.stats()`'s `fallback_reasons`, or `fxhlo compile --stats`).")
    L.append("")
    for r in results:
        fr = r.get("fallback_reasons") or {}
        if fr:
            top = sorted(fr.items(), key=lambda kv: -kv[1])[:4]
            rest = sum(fr.values()) - sum(v for _, v in top)
            s = "; ".join(f"{k} ({v})" for k, v in top)
            if rest:
                s += f"; others ({rest})"
            L.append(f"- {r['model']} / {r['path']}: {s.replace('|', '/')}")
    L.append("")
    L.append("## Times")
    L.append("")
    L.append("Seconds per model x path (one worker, one thread, compile included):")
    L.append("")
    L.append("| model | " + " | ".join(paths) + " |")
    L.append("| --- | " + " | ".join("---:" for _ in paths) + " |")
    for n in names:
        L.append(f"| {n} | " + " | ".join(
            f"{by[(n, p)].get('time_s', 0):.1f}" if (n, p) in by else "" for p in paths) + " |")
    L.append("")
    return "\n".join(L)


# ------------------------------------------------------------------------------ CLI

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fxhlo.zoo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help="comma-separated names (default: all)")
    ap.add_argument("--paths", help=f"comma-separated, of {','.join(PATHS)} (default: all)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300, help="seconds per model x path")
    ap.add_argument("--out", help="write the results as JSON")
    ap.add_argument("--table", help="write the markdown table (e.g. docs/zoo.md)")
    ap.add_argument("--header", help="a file whose text goes under the table's title")
    ap.add_argument("--list", action="store_true", help="list the models and their paths")
    ap.add_argument("--render", metavar="RESULTS_JSON",
                    help="write --table from the results of an earlier run (--out) instead of "
                         "running; the table keeps that run's command")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker_main()
        return 0
    if a.render:
        with open(a.render) as f:
            d = json.load(f)
        header = open(a.header).read() if a.header else ""
        with open(a.table or "/dev/stdout", "w") as f:
            f.write(table(d["results"], d.get("command", "python -m fxhlo.zoo"), d["seconds"],
                          header))
        return 0
    ms = models()
    if a.list:
        for m in ms.values():
            print(f"{m.name:16} {','.join(m.paths):50} {m.reduction}")
        return 0
    names = a.models.split(",") if a.models else None
    for n in names or []:
        if n not in ms:
            ap.error(f"unknown model {n!r}; known: {', '.join(ms)}")
    paths = a.paths.split(",") if a.paths else None
    for p in paths or []:
        if p not in PATHS:
            ap.error(f"unknown path {p!r}; known: {', '.join(PATHS)}")
    tasks = all_tasks(names, paths)
    t0 = time.perf_counter()

    def progress(r):
        print(f"{r['model']:16} {r['path']:12} {verdict(r):8} {r.get('time_s', 0):6.1f}s "
              f"{r['status']} {r.get('detail', '')[:150]}", flush=True)
    results = run_pool(tasks, a.jobs, a.timeout, progress)
    secs = time.perf_counter() - t0
    cmd = "python -m fxhlo.zoo " + " ".join(argv if argv is not None else sys.argv[1:])
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(command=cmd, seconds=secs, results=results), f, indent=1)
    if a.table:
        header = open(a.header).read() if a.header else ""
        with open(a.table, "w") as f:
            f.write(table(results, cmd, secs, header))
    bad = [r for r in results if verdict(r) in ("FAIL", "XPASS")]
    print(f"{len(results)} results in {secs:.0f} s; unexpected: {len(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
