"""ModelConfig: the shape and numerics of one decoder, validated once at construction.

Field names are the ones used everywhere else: config files (`config.model`), the params
tree and metrics. `from_hf_dict` / `to_hf_dict` translate to and from a `transformers`
`config.json`. It imports no jax (jax.numpy only inside the dtype properties), so the config
boundary builds it before jax starts.
"""
import dataclasses
import math
from typing import Any

SUPPORTED_MODEL_TYPES = ("qwen3", "qwen2", "llama", "qwen3_5")
LAYER_TYPES = ("full_attention", "linear_attention")
# config.json model_type values read as whale_jax's "qwen3_5" (the text decoder).
_QWEN3_5_HF_TYPES = ("qwen3_5", "qwen3_5_text")
SUPPORTED_ROPE_TYPES = ("default", "llama3")
SUPPORTED_DTYPES = ("float32", "bfloat16")
# How full attention is computed (models/attention.py): "auto" picks per call and platform.
ATTENTION_IMPLEMENTATIONS = ("auto", "dense", "blockwise", "splash")
# What the backward pass of the layer scans keeps (models/decoder.py REMAT_POLICIES).
REMAT_POLICIES = ("none", "full", "dots", "dots_with_no_batch_dims")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """A decoder-only transformer: Qwen3, Qwen2/2.5, Llama 3 or Qwen3.5 (hybrid) style.

  Attributes:
    model_type: "qwen3" (q/k RMSNorm), "qwen2" (bias on query/key/value), "llama", or
      "qwen3_5": Gated DeltaNet linear-attention layers interleaved with full-attention layers
      whose output is gated; every RMSNorm but the linear layers' output norm is zero-centered
      (scale = 1 + weight); see hybrid_decoder.py.
    vocab_size, num_layers, embed_dim, mlp_dim, num_heads, num_kv_heads, head_dim: shapes.
      head_dim need not equal embed_dim // num_heads.
    rope_theta: RoPE base frequency.
    rope_type: "default" or "llama3" (frequency-dependent scaling for long context).
    rope_factor, rope_low_frequency_factor, rope_high_frequency_factor,
      rope_original_max_positions: Llama 3 scaling parameters (ignored for "default").
    rms_norm_eps: epsilon inside every RMSNorm.
    tie_embeddings: logits use the input embedding matrix instead of a separate unembedding.
    qk_norm: RMSNorm over head_dim on queries and keys before RoPE (Qwen3).
    qkv_bias: bias on the query, key and value projections (Qwen2).
    output_bias: bias on the attention output projection (Llama `attention_bias=True`).
    max_position_embeddings: recorded for export; not a limit inside whale_jax.
    param_dtype: dtype the parameters are stored in.
    compute_dtype: dtype of activations and matmuls. Attention logits, softmax, RMSNorm
      statistics and the returned logits are float32 whatever this is.
    bos_token_id, eos_token_ids, pad_token_id: special ids recorded from the checkpoint.
    partial_rotary_factor: RoPE rotates the first rotary_dim = head_dim * factor dims of each
      query/key head and passes the rest through (Qwen3.5: 0.25).
    layer_types: "qwen3_5" only: one of LAYER_TYPES per layer (empty for other families).
    linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, linear_value_head_dim,
      linear_conv_width: "qwen3_5" only: shapes of the Gated DeltaNet layers (the recurrent
      state of one layer is [linear_num_value_heads, linear_key_head_dim,
      linear_value_head_dim]; linear_conv_width is the causal convolution's kernel width).
    attention: how full attention runs (not exported): "dense" builds the [T, S] scores,
      "blockwise" is the online-softmax version that keeps only block_size x block_size
      scores at a time, "splash" is the Pallas TPU kernel (training forward only; other calls
      fall back to blockwise), "auto" = splash on TPU for training, blockwise when there is
      more than one key block, else dense.
    attention_block_size: query and key block length of blockwise attention.
    remat: what the layer scans keep for the backward pass: "none" (everything), "full"
      (only each layer's input), "dots" (matmul outputs), "dots_with_no_batch_dims" (matmul
      outputs without batch dimensions: weight projections, not attention scores).
    unroll_layers: run the layer loop of hidden_states (plain decoders) unrolled rather than
      as a loop (not exported): none of the loop's per-layer bookkeeping (stacked residuals,
      zeroed gradient stacks), compile time growing with num_layers.
  """
  vocab_size: int
  num_layers: int
  embed_dim: int
  mlp_dim: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  model_type: str = "qwen3"
  rope_theta: float = 1_000_000.0
  rope_type: str = "default"
  rope_factor: float = 1.0
  rope_low_frequency_factor: float = 1.0
  rope_high_frequency_factor: float = 4.0
  rope_original_max_positions: int = 8192
  rms_norm_eps: float = 1e-6
  tie_embeddings: bool = True
  qk_norm: bool = True
  qkv_bias: bool = False
  output_bias: bool = False
  max_position_embeddings: int = 32_768
  param_dtype: str = "float32"
  compute_dtype: str = "float32"
  bos_token_id: int | None = None
  eos_token_ids: tuple[int, ...] = ()
  pad_token_id: int | None = None
  partial_rotary_factor: float = 1.0
  layer_types: tuple[str, ...] = ()
  linear_num_key_heads: int = 0
  linear_num_value_heads: int = 0
  linear_key_head_dim: int = 0
  linear_value_head_dim: int = 0
  linear_conv_width: int = 0
  attention: str = "auto"
  attention_block_size: int = 512
  remat: str = "none"
  unroll_layers: bool = False

  def __post_init__(self):
    for name in ("vocab_size", "num_layers", "embed_dim", "mlp_dim", "num_heads",
                 "num_kv_heads", "head_dim"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"ModelConfig.{name}={value!r} must be a positive integer.")
    if self.model_type not in SUPPORTED_MODEL_TYPES:
      raise ValueError(f"ModelConfig.model_type={self.model_type!r} is not supported; "
                       f"use one of {SUPPORTED_MODEL_TYPES}.")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(
          f"ModelConfig.num_heads={self.num_heads} is not a multiple of num_kv_heads="
          f"{self.num_kv_heads}; grouped-query attention needs num_heads = G * num_kv_heads.")
    if self.head_dim % 2:
      raise ValueError(f"ModelConfig.head_dim={self.head_dim} must be even for RoPE.")
    if self.rope_type not in SUPPORTED_ROPE_TYPES:
      raise ValueError(f"ModelConfig.rope_type={self.rope_type!r} is not supported; "
                       f"use one of {SUPPORTED_ROPE_TYPES}.")
    for name in ("param_dtype", "compute_dtype"):
      if getattr(self, name) not in SUPPORTED_DTYPES:
        raise ValueError(f"ModelConfig.{name}={getattr(self, name)!r} is not supported; "
                         f"use one of {SUPPORTED_DTYPES}.")
    if self.attention not in ATTENTION_IMPLEMENTATIONS:
      raise ValueError(f"ModelConfig.attention={self.attention!r} is not one of "
                       f"{ATTENTION_IMPLEMENTATIONS}.")
    if (not isinstance(self.attention_block_size, int) or self.attention_block_size < 8
        or self.attention_block_size % 8):
      raise ValueError(f"ModelConfig.attention_block_size={self.attention_block_size!r} must "
                       "be a positive multiple of 8 (e.g. 512).")
    if self.remat not in REMAT_POLICIES:
      raise ValueError(f"ModelConfig.remat={self.remat!r} is not one of {REMAT_POLICIES}.")
    if not isinstance(self.unroll_layers, bool):
      raise ValueError(f"ModelConfig.unroll_layers={self.unroll_layers!r} must be True or False.")
    if not isinstance(self.eos_token_ids, tuple):
      object.__setattr__(self, "eos_token_ids", tuple(self.eos_token_ids))
    if not isinstance(self.layer_types, tuple):
      object.__setattr__(self, "layer_types", tuple(self.layer_types))
    rotary_dim = self.head_dim * self.partial_rotary_factor
    if not 0 < self.partial_rotary_factor <= 1 or rotary_dim != int(rotary_dim) or rotary_dim % 2:
      raise ValueError(
          f"ModelConfig.partial_rotary_factor={self.partial_rotary_factor} with head_dim="
          f"{self.head_dim} gives {rotary_dim} rotary dims; choose a factor in (0, 1] that makes "
          "head_dim * factor an even integer.")
    self._validate_hybrid()

  def _validate_hybrid(self):
    linear_fields = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                     "linear_value_head_dim", "linear_conv_width")
    if self.model_type != "qwen3_5":
      if self.layer_types and set(self.layer_types) != {"full_attention"}:
        raise ValueError(f"ModelConfig.layer_types={self.layer_types} has linear-attention "
                         f"layers, which only model_type='qwen3_5' supports (model_type="
                         f"{self.model_type!r}). Leave layer_types empty.")
      if self.partial_rotary_factor != 1.0:
        raise ValueError(f"ModelConfig.partial_rotary_factor={self.partial_rotary_factor}: "
                         f"model_type={self.model_type!r} rotates whole heads; use 1.0.")
      return
    if len(self.layer_types) != self.num_layers:
      raise ValueError(
          f"ModelConfig.layer_types has {len(self.layer_types)} entries but num_layers="
          f"{self.num_layers}; model_type='qwen3_5' needs one of {LAYER_TYPES} per layer, e.g. "
          f"('linear_attention',) * 3 + ('full_attention',) repeated.")
    unknown = sorted(set(self.layer_types) - set(LAYER_TYPES))
    if unknown:
      raise ValueError(f"ModelConfig.layer_types contains {unknown}; use only {LAYER_TYPES}.")
    for name in linear_fields:
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"ModelConfig.{name}={value!r} must be a positive integer for "
                         "model_type='qwen3_5'.")
    if self.linear_num_value_heads % self.linear_num_key_heads:
      raise ValueError(
          f"ModelConfig.linear_num_value_heads={self.linear_num_value_heads} is not a multiple "
          f"of linear_num_key_heads={self.linear_num_key_heads}; each key head serves a group "
          "of value heads.")
    if self.qkv_bias or self.output_bias:
      raise ValueError("model_type='qwen3_5' does not support attention biases; set qkv_bias="
                       "False and output_bias=False.")
    if not self.qk_norm:
      raise ValueError("model_type='qwen3_5' always has query/key RMSNorm; set qk_norm=True.")
    if self.rope_type != "default":
      raise ValueError(f"model_type='qwen3_5' supports rope_type='default' only, not "
                       f"{self.rope_type!r}.")

  @property
  def is_hybrid(self) -> bool:
    """True for models with linear-attention layers (model_type "qwen3_5")."""
    return self.model_type == "qwen3_5"

  @property
  def rotary_dim(self) -> int:
    """Number of leading head dims that RoPE rotates."""
    return int(self.head_dim * self.partial_rotary_factor)

  @property
  def attention_layer_indices(self) -> tuple[int, ...]:
    """Indices of the full-attention layers (all layers for non-hybrid models)."""
    if not self.is_hybrid:
      return tuple(range(self.num_layers))
    return tuple(i for i, kind in enumerate(self.layer_types) if kind == "full_attention")

  @property
  def linear_layer_indices(self) -> tuple[int, ...]:
    """Indices of the linear-attention (Gated DeltaNet) layers."""
    if not self.is_hybrid:
      return ()
    return tuple(i for i, kind in enumerate(self.layer_types) if kind == "linear_attention")

  @property
  def linear_conv_channels(self) -> int:
    """Channels of a linear layer's convolution: query and key (both K * H) and value (N * E)."""
    return (2 * self.linear_num_key_heads * self.linear_key_head_dim
            + self.linear_num_value_heads * self.linear_value_head_dim)

  @property
  def param_jnp_dtype(self):
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top  # here only: no jax to read a config
    return jnp.dtype(self.param_dtype)

  @property
  def compute_jnp_dtype(self):
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    return jnp.dtype(self.compute_dtype)

  def replace(self, **changes) -> "ModelConfig":
    return dataclasses.replace(self, **changes)

  def num_params(self) -> int:
    """Number of parameters, counting a tied embedding once."""
    if self.is_hybrid:
      return self._hybrid_num_params()
    attention = self.embed_dim * self.head_dim * (2 * self.num_heads + 2 * self.num_kv_heads)
    if self.qkv_bias:
      attention += self.head_dim * (self.num_heads + 2 * self.num_kv_heads)
    if self.output_bias:
      attention += self.embed_dim
    if self.qk_norm:
      attention += 2 * self.head_dim
    layer = attention + 3 * self.embed_dim * self.mlp_dim + 2 * self.embed_dim
    embeddings = self.vocab_size * self.embed_dim * (1 if self.tie_embeddings else 2)
    return self.num_layers * layer + embeddings + self.embed_dim

  def _hybrid_num_params(self) -> int:
    embed, head_dim = self.embed_dim, self.head_dim
    attention = (embed * head_dim * (2 * self.num_heads + 2 * self.num_kv_heads)  # query, key,
                 + embed * head_dim * self.num_heads + 2 * head_dim)       # value, output, gate
    value_width = self.linear_num_value_heads * self.linear_value_head_dim
    channels = self.linear_conv_channels
    linear = (embed * channels + self.linear_conv_width * channels   # qkv, convolution
              + 2 * embed * value_width                              # output gate, output
              + 2 * embed * self.linear_num_value_heads              # beta, decay
              + 2 * self.linear_num_value_heads + self.linear_value_head_dim)
    mlp_and_norms = 3 * embed * self.mlp_dim + 2 * embed
    num_linear = len(self.linear_layer_indices)
    num_attention = self.num_layers - num_linear
    embeddings = self.vocab_size * embed * (1 if self.tie_embeddings else 2)
    return (num_attention * attention + num_linear * linear + self.num_layers * mlp_and_norms
            + embeddings + embed)

  @classmethod
  def from_hf_dict(cls, hf: dict[str, Any], **overrides) -> "ModelConfig":
    """Builds a config from a `transformers` config.json dict; raises on what is unsupported.

    A Qwen3.5 vision-language config (model_type "qwen3_5" with a text_config) gives the
    config of its text decoder; tie_word_embeddings and missing special ids come from the top
    level, as transformers' Qwen3_5ForConditionalGeneration reads them.
    """
    model_type = hf.get("model_type")
    if model_type in _QWEN3_5_HF_TYPES:
      return cls._from_qwen3_5_hf_dict(hf, **overrides)
    if model_type not in SUPPORTED_MODEL_TYPES:
      raise ValueError(
          f"config.json has model_type={model_type!r}, which whale_jax cannot load. "
          f"Supported model types: {', '.join(SUPPORTED_MODEL_TYPES)}.")
    if hf.get("mlp_bias"):
      raise ValueError("config.json sets mlp_bias=true, which whale_jax does not support.")
    if hf.get("hidden_act", "silu") != "silu":
      raise ValueError(f"config.json has hidden_act={hf['hidden_act']!r}; only 'silu' "
                       "(SwiGLU) is supported.")
    if model_type == "qwen2" and hf.get("use_sliding_window"):
      raise ValueError("config.json sets use_sliding_window=true; sliding-window attention "
                       "is not supported. Set it to false to load the model with full attention.")
    if model_type == "qwen3" and hf.get("use_sliding_window"):
      raise ValueError("config.json sets use_sliding_window=true; sliding-window attention "
                       "is not supported. Set it to false to load the model with full attention.")
    num_heads = hf["num_attention_heads"]
    rope = hf.get("rope_scaling") or hf.get("rope_parameters") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) or "default"
    if rope_type not in SUPPORTED_ROPE_TYPES:
      raise ValueError(f"config.json has rope type {rope_type!r}; supported: "
                       f"{SUPPORTED_ROPE_TYPES}.")
    rope_theta = rope.get("rope_theta", hf.get("rope_theta", 10_000.0))
    eos = hf.get("eos_token_id")
    eos_token_ids = () if eos is None else tuple(eos) if isinstance(eos, list) else (eos,)
    attention_bias = bool(hf.get("attention_bias", False))
    fields = dict(
        model_type=model_type,
        vocab_size=hf["vocab_size"],
        num_layers=hf["num_hidden_layers"],
        embed_dim=hf["hidden_size"],
        mlp_dim=hf["intermediate_size"],
        num_heads=num_heads,
        num_kv_heads=hf.get("num_key_value_heads") or num_heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // num_heads,
        rope_theta=float(rope_theta),
        rope_type=rope_type,
        rope_factor=float(rope.get("factor", 1.0)),
        rope_low_frequency_factor=float(rope.get("low_freq_factor", 1.0)),
        rope_high_frequency_factor=float(rope.get("high_freq_factor", 4.0)),
        rope_original_max_positions=int(rope.get("original_max_position_embeddings", 8192)),
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        qk_norm=model_type == "qwen3",
        qkv_bias=model_type == "qwen2" or attention_bias,
        output_bias=model_type != "qwen2" and attention_bias,
        max_position_embeddings=int(hf.get("max_position_embeddings", 32_768)),
        bos_token_id=hf.get("bos_token_id"),
        eos_token_ids=eos_token_ids,
        pad_token_id=hf.get("pad_token_id"),
    )
    fields.update(overrides)
    return cls(**fields)

  @classmethod
  def _from_qwen3_5_hf_dict(cls, hf, **overrides):
    text = dict(hf.get("text_config") or hf)
    if "text_config" in hf:
      text["tie_word_embeddings"] = hf.get("tie_word_embeddings", False)
      for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if text.get(name) is None and hf.get(name) is not None:
          text[name] = hf[name]
    if text.get("hidden_act", "silu") != "silu":
      raise ValueError(f"config.json has hidden_act={text['hidden_act']!r}; only 'silu' "
                       "(SwiGLU) is supported.")
    if text.get("attention_bias"):
      raise ValueError("config.json sets attention_bias=true, which whale_jax does not support "
                       "for qwen3_5.")
    if text.get("attn_output_gate") is False:
      raise ValueError("config.json sets attn_output_gate=false; whale_jax's qwen3_5 always "
                       "gates the attention output (as transformers does).")
    if text.get("num_experts"):
      raise ValueError(f"config.json has num_experts={text['num_experts']}: mixture-of-experts "
                       "Qwen3.5 models are not supported, only the dense ones.")
    rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) or "default"
    if rope_type != "default":
      raise ValueError(f"config.json has rope type {rope_type!r}; qwen3_5 supports 'default'.")
    num_layers = text["num_hidden_layers"]
    layer_types = text.get("layer_types")
    if layer_types is None:  # transformers' default: every full_attention_interval-th layer
      interval = text.get("full_attention_interval", 4)
      layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                     for i in range(num_layers)]
    eos = text.get("eos_token_id")
    num_heads = text["num_attention_heads"]
    fields = dict(
        model_type="qwen3_5",
        vocab_size=text["vocab_size"],
        num_layers=num_layers,
        embed_dim=text["hidden_size"],
        mlp_dim=text["intermediate_size"],
        num_heads=num_heads,
        num_kv_heads=text.get("num_key_value_heads") or num_heads,
        head_dim=text.get("head_dim") or text["hidden_size"] // num_heads,
        rope_theta=float(rope.get("rope_theta", text.get("rope_theta", 10_000.0))),
        partial_rotary_factor=float(rope.get("partial_rotary_factor",
                                             text.get("partial_rotary_factor", 0.25))),
        rms_norm_eps=float(text.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(text.get("tie_word_embeddings", False)),
        qk_norm=True,
        qkv_bias=False,
        output_bias=False,
        max_position_embeddings=int(text.get("max_position_embeddings", 32_768)),
        bos_token_id=text.get("bos_token_id"),
        eos_token_ids=() if eos is None else tuple(eos) if isinstance(eos, list) else (eos,),
        pad_token_id=text.get("pad_token_id"),
        layer_types=tuple(layer_types),
        linear_num_key_heads=text.get("linear_num_key_heads", 16),
        linear_num_value_heads=text.get("linear_num_value_heads", 32),
        linear_key_head_dim=text.get("linear_key_head_dim", 128),
        linear_value_head_dim=text.get("linear_value_head_dim", 128),
        linear_conv_width=text.get("linear_conv_kernel_dim", 4),
    )
    fields.update(overrides)
    return cls(**fields)

  def _qwen3_5_hf_dict(self) -> dict[str, Any]:
    """The text-only `transformers` config (Qwen3_5ForCausalLM, model_type "qwen3_5_text")."""
    return dict(
        architectures=["Qwen3_5ForCausalLM"],
        model_type="qwen3_5_text",
        **self._shared_hf_fields(),
        attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta,
                         "partial_rotary_factor": self.partial_rotary_factor},
        layer_types=list(self.layer_types),
        linear_num_key_heads=self.linear_num_key_heads,
        linear_num_value_heads=self.linear_num_value_heads,
        linear_key_head_dim=self.linear_key_head_dim,
        linear_value_head_dim=self.linear_value_head_dim,
        linear_conv_kernel_dim=self.linear_conv_width,
    )

  def _shared_hf_fields(self) -> dict[str, Any]:
    """The config.json fields every exported architecture writes alike."""
    return dict(
        vocab_size=self.vocab_size,
        num_hidden_layers=self.num_layers,
        hidden_size=self.embed_dim,
        intermediate_size=self.mlp_dim,
        num_attention_heads=self.num_heads,
        num_key_value_heads=self.num_kv_heads,
        head_dim=self.head_dim,
        hidden_act="silu",
        rms_norm_eps=self.rms_norm_eps,
        tie_word_embeddings=self.tie_embeddings,
        max_position_embeddings=self.max_position_embeddings,
        torch_dtype=self.param_dtype,
        dtype=self.param_dtype,
        bos_token_id=self.bos_token_id,
        eos_token_id=(list(self.eos_token_ids) if len(self.eos_token_ids) > 1 else
                      self.eos_token_ids[0] if self.eos_token_ids else None),
        pad_token_id=self.pad_token_id,
        use_cache=True,
    )

  def to_hf_dict(self) -> dict[str, Any]:
    """The `transformers` config.json for this model (float dtype = param_dtype)."""
    if self.is_hybrid:
      return self._qwen3_5_hf_dict()
    if self.partial_rotary_factor != 1.0:
      raise ValueError(f"partial_rotary_factor={self.partial_rotary_factor} cannot be exported "
                       f"as model_type={self.model_type!r}, which rotates the whole head.")
    architectures = {"qwen3": "Qwen3ForCausalLM", "qwen2": "Qwen2ForCausalLM",
                     "llama": "LlamaForCausalLM"}
    hf = dict(architectures=[architectures[self.model_type]], model_type=self.model_type,
              **self._shared_hf_fields(), rope_theta=self.rope_theta)
    rope = {"rope_type": self.rope_type, "rope_theta": self.rope_theta}
    if self.rope_type == "llama3":
      rope.update(factor=self.rope_factor, low_freq_factor=self.rope_low_frequency_factor,
                  high_freq_factor=self.rope_high_frequency_factor,
                  original_max_position_embeddings=self.rope_original_max_positions)
    hf["rope_parameters"] = rope
    hf["rope_scaling"] = rope if self.rope_type != "default" else None
    if self.model_type == "qwen2":
      if not self.qkv_bias or self.output_bias:
        raise ValueError("Qwen2 checkpoints always have query/key/value bias and no output bias; "
                         f"qkv_bias={self.qkv_bias}, output_bias={self.output_bias} cannot be "
                         "exported as model_type='qwen2'.")
      hf.update(use_sliding_window=False)
    else:
      if self.qkv_bias != self.output_bias:
        raise ValueError(f"{self.model_type} checkpoints have one attention_bias flag for "
                         f"query/key/value and output; qkv_bias={self.qkv_bias} and output_bias="
                         f"{self.output_bias} cannot be exported as model_type="
                         f"{self.model_type!r}.")
      hf.update(attention_bias=self.qkv_bias)
      if self.model_type == "llama":
        hf.update(mlp_bias=False)
      else:
        hf.update(use_sliding_window=False)
    if self.qk_norm != (self.model_type == "qwen3"):
      raise ValueError(f"qk_norm={self.qk_norm} does not match model_type="
                       f"{self.model_type!r} (only qwen3 has q/k norm); it cannot be exported.")
    return hf
