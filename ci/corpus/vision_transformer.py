"""Vision transformers from ``transformers`` configs: ViT, DeiT (distillation token), Swin (shifted
windows), LeViT (a hybrid: convolutional stem, attention with learned biases, BatchNorm) and MobileViT.

Full size: 224 px (MobileViT 256 px) at small widths (ViT/DeiT at DeiT-small's hidden 384, 6 layers;
Swin at embed 64, depths 2-2-4-2).  CI size: 32-64 px, 1-2 layers, hidden 32-64.
"""

from __future__ import annotations

from . import Built, Entry, export_torch, image


def _model(arch: str, full: bool):
    import transformers as tf

    if arch == "vit":
        cfg = tf.ViTConfig(image_size=224 if full else 32, patch_size=16 if full else 8, hidden_size=384 if full else 64,
                           num_hidden_layers=6 if full else 2, num_attention_heads=6 if full else 4,
                           intermediate_size=1536 if full else 128, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0)
        return cfg, tf.ViTForImageClassification, cfg.image_size
    if arch == "deit":
        cfg = tf.DeiTConfig(image_size=224 if full else 32, patch_size=16 if full else 8, hidden_size=384 if full else 64,
                            num_hidden_layers=6 if full else 2, num_attention_heads=6 if full else 4,
                            intermediate_size=1536 if full else 128, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0)
        return cfg, tf.DeiTForImageClassificationWithTeacher, cfg.image_size
    if arch == "swin":
        cfg = tf.SwinConfig(image_size=224 if full else 64, patch_size=4, embed_dim=64 if full else 32,
                            depths=[2, 2, 4, 2] if full else [2, 1], num_heads=[2, 4, 8, 16] if full else [2, 4],
                            window_size=7 if full else 4, drop_path_rate=0.0, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0)
        return cfg, tf.SwinForImageClassification, cfg.image_size
    if arch == "levit":
        cfg = tf.LevitConfig(image_size=224 if full else 64, hidden_sizes=[128, 256, 384] if full else [32, 48, 64],
                             num_attention_heads=[4, 6, 8] if full else [2, 2, 2], depths=[2, 3, 4] if full else [1, 1, 1],
                             key_dim=[16, 16, 16], drop_path_rate=0)
        return cfg, tf.LevitForImageClassification, cfg.image_size
    if arch == "mobilevit":
        cfg = tf.MobileViTConfig(image_size=256 if full else 64,
                                 hidden_sizes=[64, 80, 96] if full else [32, 40, 48],
                                 neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320] if full else [8, 8, 16, 24, 32, 40, 80],
                                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)
        return cfg, tf.MobileViTForImageClassification, cfg.image_size
    raise KeyError(arch)


def build_vit(size: str, batch: int, arch: str) -> Built:
    import torch

    cfg, cls, px = _model(arch, size == "full")
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(cfg).eval()
    return export_torch(model, {"pixel_values": image(batch, 3, px)}, outputs=1)


ENTRIES = [
    Entry("vit", "vision-transformer", "ViT (DeiT-small widths, 6 layers), 224 px", build_vit, params=(("arch", "vit"),)),
    Entry("vit-b8", "vision-transformer", "ViT, batch 8", build_vit, batch=8, params=(("arch", "vit"),)),
    Entry("deit", "vision-transformer", "DeiT with distillation token", build_vit, params=(("arch", "deit"),)),
    Entry("swin", "vision-transformer", "Swin (shifted windows, patch merging), 224 px", build_vit,
          params=(("arch", "swin"),)),
    Entry("levit", "vision-transformer", "LeViT hybrid: conv stem + attention with learned biases", build_vit,
          params=(("arch", "levit"),)),
    Entry("mobilevit", "vision-transformer", "MobileViT (xx-small widths), 256 px", build_vit,
          params=(("arch", "mobilevit"),)),
]
