"""The menagerie's architectures: how each is built (random weights, nothing downloaded) and called.

Three sources, each as people use it:
- torchvision: every classification model `list_models` names, every segmentation model, and the detection
  models, each at a small input (64x64; the Vision Transformers told `image_size=64`, ViT-H 56, MaxViT at the
  224 its partitions need, Inception at the 299 its auxiliary head needs in training), class targets and
  cross-entropy; detection in train mode with boxes, the loss the sum of the model's own losses, as
  torchvision's reference scripts train it;
- timm (the `models` extra): at least one model per family, `timm.create_model(name, num_classes=10)`, told a
  64x64 image where the model takes `img_size` and runs at it, else at the size its configuration names;
- Hugging Face transformers (the `models` extra): a family per config class from a tiny config, called with a
  keyword batch that carries `labels`, so the loss is the model's own `output.loss`.

`entries()` lists them; `Entry.build()` returns a `Built`: the model, how to call it, the target and the loss.
"""
from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable

import torch
from torch import nn

SMALL = 64            # the image side for models that take any size
CLASSES = 10


@dataclasses.dataclass
class Built:
    model: nn.Module
    args: tuple
    kwargs: dict
    target: torch.Tensor | None               # what diagnose.run gets as `target` (None: the model's own loss)
    loss: Callable[[object], torch.Tensor]     # the step's loss from the model's output, for the instruments
    loss_fn: Callable | None = None            # diagnose.run's loss_fn, where neither target nor labels serve
    input: str = ""                            # the input as the report shows it

    def output(self):
        return self.model(*self.args, **self.kwargs)


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str                 # "torchvision/resnet18", "timm/vit_tiny_patch16_224", "transformers/gpt2"
    family: str
    make: Callable[[], Built]

    @property
    def source(self) -> str:
        return self.name.split("/")[0]

    def build(self) -> Built:
        torch.manual_seed(0)
        built = self.make()
        built.model.train()
        return built


def _classifier(model: nn.Module, side: int, batch: int = 2) -> Built:
    x = torch.rand(batch, 3, side, side)
    target = torch.arange(batch) % CLASSES
    return Built(model, (x,), {}, target, lambda out: nn.functional.cross_entropy(_logits(out), target),
                 input=f"{batch}x3x{side}x{side}")


def _logits(out) -> torch.Tensor:
    """A classifier's logits: Inception and GoogLeNet return (logits, aux...) in train mode."""
    return out if isinstance(out, torch.Tensor) else out[0]


# --- torchvision -------------------------------------------------------------------------------------------------

# MaxViT's partitions need 224; Inception's aux head (on in training) its own 299; ViT-H's patch is 14
_TV_SIDE = {"maxvit_t": 224, "inception_v3": 299, "vit_h_14": 56}
_TV_KWARGS = {name: {"image_size": _TV_SIDE.get(name, SMALL)} for name in      # a multiple of the patch
              ("vit_b_16", "vit_b_32", "vit_h_14", "vit_l_16", "vit_l_32")}
_TV_KWARGS |= {"inception_v3": {"init_weights": False}, "googlenet": {"init_weights": False}}


def _torchvision_classification(name: str) -> Callable[[], Built]:
    def make():
        import torchvision
        model = torchvision.models.get_model(name, weights=None, num_classes=CLASSES, **_TV_KWARGS.get(name, {}))
        return _classifier(model, _TV_SIDE.get(name, SMALL))
    return make


def _torchvision_segmentation(name: str) -> Callable[[], Built]:
    def make():
        import torchvision
        model = torchvision.models.get_model(name, weights=None, weights_backbone=None, num_classes=3)
        x = torch.rand(2, 3, SMALL, SMALL)
        mask = torch.randint(0, 3, (2, SMALL, SMALL))
        return Built(model, (x,), {}, mask, lambda out: nn.functional.cross_entropy(out["out"], mask),
                     input=f"2x3x{SMALL}x{SMALL}")
    return make


def _summed_losses(out, target=None) -> torch.Tensor:
    return sum(out.values())


def _torchvision_detection(name: str) -> Callable[[], Built]:
    def make():
        import torchvision
        extra = {} if name.startswith("ssd") else {"min_size": SMALL * 2, "max_size": SMALL * 2}
        model = torchvision.models.get_model(name, weights=None, weights_backbone=None, num_classes=3, **extra)
        images = [torch.rand(3, SMALL * 2, SMALL * 2) for _ in range(2)]
        targets = [_detection_target(name, i) for i in range(2)]
        return Built(model, (images, targets), {}, None, _summed_losses, loss_fn=_summed_losses,
                     input=f"2 images 3x{SMALL * 2}x{SMALL * 2} with boxes")
    return make


def _detection_target(name: str, i: int) -> dict:
    boxes = torch.tensor([[10.0, 12.0, 70.0, 90.0], [40.0, 30.0, 110.0, 100.0]]) + i
    target = {"boxes": boxes, "labels": torch.tensor([1, 2])}
    if name.startswith("maskrcnn"):
        target["masks"] = torch.zeros(2, SMALL * 2, SMALL * 2, dtype=torch.uint8)
        target["masks"][:, 20:80, 20:80] = 1
    if name.startswith("keypointrcnn"):
        target["keypoints"] = torch.tensor([[[20.0, 30.0, 1.0]] * 17, [[50.0, 60.0, 1.0]] * 17])
    return target


def _torchvision_entries() -> list[Entry]:
    import torchvision.models as tvm
    found = []
    for name in tvm.list_models(module=tvm):
        found.append(Entry(f"torchvision/{name}", _family(name), _torchvision_classification(name)))
    for name in tvm.list_models(module=tvm.segmentation):
        found.append(Entry(f"torchvision/{name}", "segmentation", _torchvision_segmentation(name)))
    for name in tvm.list_models(module=tvm.detection):
        found.append(Entry(f"torchvision/{name}", "detection", _torchvision_detection(name)))
    return found


def _family(name: str) -> str:
    return name.rstrip("0123456789_").split("_")[0].rstrip("0123456789") or name


# --- timm ----------------------------------------------------------------------------------------------------------

TIMM_MODELS = (
    "resnet18 resnet26d resnetv2_50 resnext26ts seresnext26d_32x4d ecaresnet26t skresnet18 resnest14d "
    "res2net50_14w_8s bat_resnext26ts efficientnet_b0 tf_efficientnet_lite0 efficientnetv2_rw_t tinynet_e "
    "mobilenetv2_050 mobilenetv3_small_050 mobilenetv4_conv_small mnasnet_small fbnetc_100 hardcorenas_a mixnet_s "
    "lcnet_050 ghostnet_050 ghostnetv2_100 rexnet_100 regnetx_002 regnety_002 regnetz_b16 densenet121 dla34 dpn48b "
    "vgg11 inception_v3 xception41 convnext_atto convnextv2_atto inception_next_tiny efficientformer_l1 "
    "efficientformerv2_s0 levit_128s levit_conv_128s vit_tiny_patch16_224 deit_tiny_patch16_224 "
    "eva02_tiny_patch14_224 beit_base_patch16_224 cait_xxs24_224 xcit_nano_12_p16_224 convit_tiny pit_ti_224 "
    "tnt_s_patch16_224 crossvit_tiny_240 swin_tiny_patch4_window7_224 swinv2_cr_tiny_ns_224 "
    "mixer_s32_224 resmlp_12_224 gmlp_ti16_224 poolformer_s12 poolformerv2_s12 coat_lite_tiny edgenext_xx_small "
    "mobilevit_xxs mobilevitv2_050 repvgg_a0 mobileone_s0 hrnet_w18_small cspresnet50 cspdarknet53 darknet17 "
    "cs3darknet_focus_s nf_resnet26 dm_nfnet_f0 gernet_s efficientvit_b0 efficientvit_m0 fastvit_t8 repvit_m0_9 "
    "hgnet_tiny hgnetv2_b0 mambaout_femto starnet_s1 volo_d1_224 twins_svt_small pvt_v2_b0 gcvit_xxtiny "
    "coatnet_nano_rw_224 maxvit_nano_rw_256 sequencer2d_s visformer_tiny tresnet_m selecsls42b ese_vovnet19b_dw "
    "halonet26t botnet26t_256 lambda_resnet26t nest_tiny davit_tiny focalnet_tiny_srf nextvit_small "
    "tiny_vit_5m_224 hiera_tiny_224 vitamin_small_224 rdnet_tiny convmixer_768_32 shvit_s1 "
    "test_vit test_convnext test_efficientnet").split()


def _timm(name: str) -> Callable[[], Built]:
    def make():
        import timm
        try:        # a 64x64 image where the model takes img_size (patch grids, windows) and runs at it
            model = timm.create_model(name, pretrained=False, num_classes=CLASSES, img_size=SMALL)
        except TypeError:
            model = timm.create_model(name, pretrained=False, num_classes=CLASSES)
        if _takes(model, SMALL):
            return _classifier(model, SMALL)
        torch.manual_seed(0)    # else at the size its configuration names, built as it names it
        model = timm.create_model(name, pretrained=False, num_classes=CLASSES)
        return _classifier(model, model.pretrained_cfg["input_size"][-1])
    return make


def _takes(model: nn.Module, side: int) -> bool:
    try:
        with torch.no_grad():
            model.train()(torch.rand(2, 3, side, side))     # as the lenses run it: train mode, a batch of 2
        return True
    except Exception:  # noqa: BLE001 - any failure at this size means: use the size the model names
        return False


# --- Hugging Face transformers ----------------------------------------------------------------------------------

SEQ = 8
VOCAB = 100
_TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
         "vocab_size": VOCAB, "max_position_embeddings": 64, "pad_token_id": 0, "bos_token_id": 1,
         "eos_token_id": 2}
_DECODER = {**_TINY, "num_key_value_heads": 2}
_SEQ2SEQ = {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
            "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "vocab_size": VOCAB,
            "max_position_embeddings": 64, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
            "decoder_start_token_id": 2}

# family: (config class, model class, config keywords, batch kind)
HF_FAMILIES = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64,
                                              "vocab_size": VOCAB, "bos_token_id": 1, "eos_token_id": 2}, "causal"),
    "bert": ("BertConfig", "BertForSequenceClassification", {**_TINY, "num_labels": 3}, "classify"),
    "roberta": ("RobertaConfig", "RobertaForSequenceClassification",
                {**_TINY, "pad_token_id": 1, "max_position_embeddings": 72, "num_labels": 3}, "classify"),
    "distilbert": ("DistilBertConfig", "DistilBertForSequenceClassification",
                   {"dim": 64, "n_layers": 2, "n_heads": 4, "hidden_dim": 128, "vocab_size": VOCAB,
                    "max_position_embeddings": 64, "num_labels": 3}, "classify"),
    "albert": ("AlbertConfig", "AlbertForSequenceClassification",
               {**_TINY, "embedding_size": 32, "num_labels": 3}, "classify"),
    "electra": ("ElectraConfig", "ElectraForSequenceClassification",
                {**_TINY, "embedding_size": 32, "num_labels": 3}, "classify"),
    "deberta-v2": ("DebertaV2Config", "DebertaV2ForSequenceClassification", {**_TINY, "num_labels": 3}, "classify"),
    "llama": ("LlamaConfig", "LlamaForCausalLM", _DECODER, "causal"),
    "mistral": ("MistralConfig", "MistralForCausalLM", _DECODER, "causal"),
    "mixtral (mixture of experts)": ("MixtralConfig", "MixtralForCausalLM",
                                     {**_DECODER, "num_local_experts": 4, "num_experts_per_tok": 2}, "causal"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", _DECODER, "causal"),
    "qwen2-moe (mixture of experts)": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                                       {**_DECODER, "num_experts": 4, "num_experts_per_tok": 2,
                                        "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64},
                                       "causal"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {**_DECODER, "head_dim": 16}, "causal"),
    "phi": ("PhiConfig", "PhiForCausalLM", _DECODER, "causal"),
    "gpt-neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", _TINY, "causal"),
    "opt": ("OPTConfig", "OPTForCausalLM", {"hidden_size": 64, "num_hidden_layers": 2, "ffn_dim": 128,
                                            "num_attention_heads": 4, "word_embed_proj_dim": 64,
                                            "vocab_size": VOCAB, "max_position_embeddings": 64,
                                            "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}, "causal"),
    "bloom": ("BloomConfig", "BloomForCausalLM", {"hidden_size": 64, "n_layer": 2, "n_head": 4,
                                                  "vocab_size": VOCAB, "pad_token_id": 0, "bos_token_id": 1,
                                                  "eos_token_id": 2}, "causal"),
    "falcon": ("FalconConfig", "FalconForCausalLM", {**_TINY, "new_decoder_architecture": False}, "causal"),
    "t5 (encoder-decoder)": ("T5Config", "T5ForConditionalGeneration",
                             {"d_model": 64, "d_ff": 128, "num_layers": 2, "num_heads": 4, "d_kv": 16,
                              "vocab_size": VOCAB, "pad_token_id": 0, "eos_token_id": 2,
                              "decoder_start_token_id": 0}, "seq2seq"),
    "bart (encoder-decoder)": ("BartConfig", "BartForConditionalGeneration", _SEQ2SEQ, "seq2seq"),
    "marian (encoder-decoder)": ("MarianConfig", "MarianMTModel", _SEQ2SEQ, "seq2seq"),
    "vit (vision)": ("ViTConfig", "ViTForImageClassification",
                     {**_TINY, "image_size": 32, "patch_size": 8, "num_labels": 3}, "image"),
    "swin (vision)": ("SwinConfig", "SwinForImageClassification",
                      {"image_size": 32, "patch_size": 4, "embed_dim": 16, "depths": [1, 1], "num_heads": [2, 2],
                       "window_size": 4, "num_labels": 3}, "image"),
    "convnext (vision)": ("ConvNextConfig", "ConvNextForImageClassification",
                          {"num_stages": 2, "hidden_sizes": [16, 32], "depths": [1, 1], "num_labels": 3}, "image"),
}


def _hugging_face(config_class: str, model_class: str, settings: dict, kind: str) -> Callable[[], Built]:
    def make():
        import transformers
        config = getattr(transformers, config_class)(**settings)
        model = getattr(transformers, model_class)(config)
        batch, shown = _hf_batch(kind)
        return Built(model, (), batch, None, lambda out: out.loss, input=shown)
    return make


def _hf_batch(kind: str) -> tuple[dict, str]:
    ids = torch.randint(3, VOCAB, (2, SEQ))
    if kind == "causal":
        return {"input_ids": ids, "labels": ids}, f"input_ids 2x{SEQ}, labels"
    if kind == "classify":
        return ({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor([0, 2])},
                f"input_ids 2x{SEQ}, attention_mask, labels")
    if kind == "seq2seq":
        return ({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.randint(3, VOCAB, (2, 6))},
                f"input_ids 2x{SEQ}, attention_mask, labels 2x6")
    return {"pixel_values": torch.rand(2, 3, 32, 32), "labels": torch.tensor([0, 2])}, "pixel_values 2x3x32x32, labels"


# --- all -----------------------------------------------------------------------------------------------------------

def extras_installed() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("timm", "transformers"))


def entries() -> list[Entry]:
    found = _torchvision_entries()
    if extras_installed():
        found += [Entry(f"timm/{name}", _family(name), _timm(name)) for name in TIMM_MODELS]
        found += [Entry(f"transformers/{family.split(' ')[0]}", family, _hugging_face(*spec))
                  for family, spec in HF_FAMILIES.items()]
    return found


# the sample make test runs (tests/test_menagerie.py) and the diagnosis benchmark times
# (tests/benchmarks/diagnose_sample.py): the smallest models of each source, and one of each kind the others are not
SAMPLE = (
    "torchvision/squeezenet1_1", "torchvision/shufflenet_v2_x0_5", "torchvision/mobilenet_v3_small",
    "torchvision/lraspp_mobilenet_v3_large",
    "timm/test_vit", "timm/test_convnext", "timm/test_efficientnet", "timm/mobilenetv3_small_050",
    "transformers/gpt2", "transformers/bert", "transformers/t5", "transformers/mixtral",
)


def by_name() -> dict[str, Entry]:
    return {entry.name: entry for entry in entries()}
