"""Encoder and decoder transformers from ``transformers`` configs (random init, fixed seed, eager attention).

Full size: MiniLM-like encoders (hidden 384, 6 layers, 12 heads, sequence 128; T5 at t5-small's widths),
small decoders at sequence 128 (GPT-2 / OPT / GPT-NeoX at hidden 384, a LLaMA block at hidden 512 with
grouped-query attention: 8 query heads over 2 key/value heads, RoPE, RMSNorm, SwiGLU).  CI size: the same
graphs at hidden 64, 2 layers, sequence 32, a 1,000-token vocabulary.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import Built, Entry, export_torch, token_ids


def _dims(size: str) -> dict[str, int]:
    if size == "full":
        return {"hidden": 384, "layers": 6, "heads": 12, "inter": 1536, "seq": 128, "vocab": 30522}
    return {"hidden": 64, "layers": 2, "heads": 4, "inter": 128, "seq": 32, "vocab": 1000}


def _encoder_config(arch: str, d: dict[str, int]) -> Any:
    import transformers as tf

    common = dict(vocab_size=d["vocab"], hidden_size=d["hidden"], num_hidden_layers=d["layers"],
                  num_attention_heads=d["heads"], intermediate_size=d["inter"], max_position_embeddings=512,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if arch == "bert":
        return tf.BertConfig(**common), tf.BertModel
    if arch == "roberta":
        return tf.RobertaConfig(**common, pad_token_id=1), tf.RobertaModel
    if arch == "albert":
        return tf.AlbertConfig(**common, embedding_size=128 if d["hidden"] > 128 else 32,
                               classifier_dropout_prob=0.0), tf.AlbertModel
    if arch == "deberta":
        return tf.DebertaV2Config(**common, relative_attention=True, position_buckets=64 if d["seq"] > 32 else 16,
                                  max_relative_positions=-1, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm",
                                  share_att_key=True, position_biased_input=False), tf.DebertaV2Model
    if arch == "mpnet":
        return tf.MPNetConfig(**common), tf.MPNetModel
    if arch == "t5":
        wide = d["hidden"] > 64
        return tf.T5Config(vocab_size=32128 if wide else d["vocab"], d_model=512 if wide else 64, d_kv=64 if wide else 16,
                           d_ff=2048 if wide else 128, num_layers=d["layers"], num_heads=8 if wide else 4,
                           dropout_rate=0.0, feed_forward_proj="gated-gelu"), tf.T5EncoderModel
    raise KeyError(arch)


def build_encoder(size: str, batch: int, arch: str) -> Built:
    import torch

    d = _dims(size)
    config, cls = _encoder_config(arch, d)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(config).eval()
    ids = token_ids(batch, d["seq"], d["vocab"] if arch != "t5" else config.vocab_size)
    mask = np.ones_like(ids)
    if batch > 1:
        mask[1:, d["seq"] * 3 // 4:] = 0  # padded rows, as a batch of sentences of different lengths has
    return export_torch(model, {"input_ids": ids, "attention_mask": mask}, outputs=1)


def _decoder_config(arch: str, size: str) -> Any:
    import transformers as tf

    full = size == "full"
    vocab = 16000 if full else 1000
    if arch == "gpt2":
        return tf.GPT2Config(vocab_size=vocab, n_positions=512, n_embd=384 if full else 64, n_layer=6 if full else 2,
                             n_head=6 if full else 4, bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                             use_cache=False), tf.GPT2LMHeadModel
    if arch == "llama":
        return tf.LlamaConfig(vocab_size=vocab, hidden_size=512 if full else 64, intermediate_size=1376 if full else 172,
                              num_hidden_layers=4 if full else 2, num_attention_heads=8 if full else 4,
                              num_key_value_heads=2 if full else 2, max_position_embeddings=512, rms_norm_eps=1e-5,
                              use_cache=False, tie_word_embeddings=False), tf.LlamaForCausalLM
    if arch == "neox":
        return tf.GPTNeoXConfig(vocab_size=vocab, hidden_size=384 if full else 64, num_hidden_layers=4 if full else 2,
                                num_attention_heads=6 if full else 4, intermediate_size=1536 if full else 256,
                                rotary_pct=0.25, max_position_embeddings=512, use_parallel_residual=True,
                                use_cache=False), tf.GPTNeoXForCausalLM
    if arch == "opt":
        return tf.OPTConfig(vocab_size=vocab, hidden_size=384 if full else 64, num_hidden_layers=4 if full else 2,
                            ffn_dim=1536 if full else 256, num_attention_heads=6 if full else 4,
                            word_embed_proj_dim=384 if full else 64, max_position_embeddings=512, dropout=0.0,
                            attention_dropout=0.0, use_cache=False), tf.OPTForCausalLM
    raise KeyError(arch)


def build_decoder(size: str, batch: int, arch: str) -> Built:
    import torch

    config, cls = _decoder_config(arch, size)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(config).eval()
    seq = 128 if size == "full" else 32
    ids = token_ids(batch, seq, config.vocab_size)
    inputs = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    return export_torch(model, inputs, outputs=1)


ENTRIES = [
    Entry("bert", "encoder", "BERT (MiniLM widths), seq 128", build_encoder, params=(("arch", "bert"),)),
    Entry("bert-b8", "encoder", "BERT, batch 8 with padded rows", build_encoder, batch=8, params=(("arch", "bert"),)),
    Entry("roberta", "encoder", "RoBERTa, seq 128", build_encoder, params=(("arch", "roberta"),)),
    Entry("albert", "encoder", "ALBERT (factorised embedding, shared layers)", build_encoder,
          params=(("arch", "albert"),)),
    Entry("deberta", "encoder", "DeBERTa-v2 (disentangled relative attention)", build_encoder,
          params=(("arch", "deberta"),)),
    Entry("mpnet", "encoder", "MPNet (relative position bias)", build_encoder, params=(("arch", "mpnet"),)),
    Entry("t5-encoder", "encoder", "T5 encoder (t5-small widths, gated GELU, RMS norm)", build_encoder,
          params=(("arch", "t5"),)),
    Entry("gpt2", "decoder", "GPT-2 LM, seq 128", build_decoder, params=(("arch", "gpt2"),)),
    Entry("llama", "decoder", "LLaMA block: RoPE, RMSNorm, SwiGLU, GQA 8/2 heads", build_decoder,
          params=(("arch", "llama"),)),
    Entry("llama-b8", "decoder", "LLaMA, batch 8", build_decoder, batch=8, params=(("arch", "llama"),)),
    Entry("gpt-neox", "decoder", "GPT-NeoX (partial rotary, parallel residual)", build_decoder,
          params=(("arch", "neox"),)),
    Entry("opt", "decoder", "OPT LM, seq 128", build_decoder, params=(("arch", "opt"),)),
]
