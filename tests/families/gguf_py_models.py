"""Random-weight GGUF files of the new families, written by llama.cpp's own
gguf-py (from its source bundle: scripts/setup_test_material.sh) with its
tensor names and metadata keys, as its convert_hf_to_gguf.py writes them:
a file of ours is then never what proves ours right.

  write_qwen35(path, vocab_gguf, gguf_py_dir, seed=..., ...)

The vocabulary comes from one of llama.cpp's models/ggml-vocab-*.gguf
(every tokenizer.* key copied), so the model tokenizes as the real one.
"""
import os
import sys

# Qwen3.5 in small real proportions: three delta-rule layers to one of full
# attention, twice as many value heads as key heads (as its 9B and 27B; the
# order llama.cpp holds them in then matters), RoPE on a quarter of each
# attention head, one MTP block past the decoder's layers.
QWEN35_SHAPE = dict(hidden=256, ffn=768, layers=8, heads=4, kv_heads=2, head_dim=128, conv=4,
                    key_heads=2, value_heads=4, ssm_head=64, nextn=1, context=4096)


def _gguf(gguf_py_dir):
    if gguf_py_dir not in sys.path:
        sys.path.insert(0, gguf_py_dir)
    import gguf  # noqa: E402 (llama.cpp's, from its bundle)
    return gguf


def _copy_vocab(gguf, writer, vocab_gguf):
    """Every tokenizer.* key of the vocabulary file, as it holds them."""
    reader = gguf.GGUFReader(vocab_gguf)
    n_vocab = None
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                value = [bytes(field.parts[i]).decode("utf-8", "surrogateescape") for i in field.data]
            else:
                value = [field.parts[i].tolist()[0] for i in field.data]
            writer.add_array(field.name, value)
            if field.name == "tokenizer.ggml.tokens":
                n_vocab = len(value)
        elif vtype == gguf.GGUFValueType.STRING:
            writer.add_string(field.name, bytes(field.parts[field.data[0]]).decode("utf-8"))
        else:
            writer.add_key_value(field.name, field.parts[field.data[0]].tolist()[0], vtype)
    return n_vocab


def _random(rng, scale):
    """Random matrices of deviation `scale`, and norm gains near 1."""
    import numpy as np

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def gain(n):
        return (1.0 + rng.standard_normal(n) * 0.1).astype(np.float32)

    return mat, gain


def _finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_qwen35(path, vocab_gguf, gguf_py_dir, seed=1, scale=0.02, shape=None, planted=False):
    """A Qwen3.5 (qwen35) file of random F32 weights (norm gains near 1, A
    negative as -exp(A_log) is). Returns the shape used.

    planted: weights that make the MTP block predict what the target does.
    Every layer's output projections are zero, so the target's last hidden
    state is its token's embedding and its next token is a fixed permutation
    of the current one (its head is the embedding's rows permuted); the MTP
    block's eh_proj passes the token's normed embedding alone and its own
    outputs are zero, so it reads the token it is given and predicts the
    same successor: its drafts should all be accepted."""
    import numpy as np
    gguf = _gguf(gguf_py_dir)
    s = dict(QWEN35_SHAPE, **(shape or {}))
    rng = np.random.default_rng(seed)
    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.QWEN35]
    w = gguf.GGUFWriter(path, arch)
    n_vocab = _copy_vocab(gguf, w, vocab_gguf)
    H, L, N = s["hidden"], s["layers"], s["nextn"]
    w.add_context_length(s["context"])
    w.add_embedding_length(H)
    w.add_feed_forward_length(s["ffn"])
    w.add_block_count(L + N)
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_dimension_count(s["head_dim"] // 4)
    half = s["head_dim"] // 8
    w.add_rope_dimension_sections([(half + 2) // 3, (half + 1) // 3, half // 3, 0])
    w.add_rope_freq_base(10000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_ssm_conv_kernel(s["conv"])
    w.add_ssm_state_size(s["ssm_head"])
    w.add_ssm_group_count(s["key_heads"])
    w.add_ssm_time_step_rank(s["value_heads"])
    w.add_ssm_inner_size(s["ssm_head"] * s["value_heads"])
    recurrent = [(i + 1) % 4 != 0 for i in range(L)]
    w.add_recurrent_layers(recurrent + [False] * N)
    w.add_full_attention_interval(4)
    w.add_nextn_predict_layers(N)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    mat, gain = _random(rng, scale)

    def t(name, data):
        w.add_tensor(name, data)

    kd, vd = s["key_heads"] * s["ssm_head"], s["value_heads"] * s["ssm_head"]
    qd, kvd = s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    embed = (rng.standard_normal((n_vocab, H)) * (1.0 if planted else scale)).astype(np.float32)
    t("token_embd.weight", embed)
    t("output_norm.weight", gain(H))
    if planted:
        # Row perm[x] of the head is x's embedding: after x comes perm[x].
        perm = rng.permutation(n_vocab)
        head = np.empty_like(embed)
        head[perm] = embed
        t("output.weight", head)

    def out_mat(rows, cols):
        return np.zeros((rows, cols), np.float32) if planted else mat(rows, cols)

    def attention(b):
        t(f"blk.{b}.attn_q.weight", mat(2 * qd, H))
        t(f"blk.{b}.attn_k.weight", mat(kvd, H))
        t(f"blk.{b}.attn_v.weight", mat(kvd, H))
        t(f"blk.{b}.attn_output.weight", out_mat(H, qd))
        t(f"blk.{b}.attn_q_norm.weight", gain(s["head_dim"]))
        t(f"blk.{b}.attn_k_norm.weight", gain(s["head_dim"]))

    def block(b, rec):
        t(f"blk.{b}.attn_norm.weight", gain(H))
        t(f"blk.{b}.post_attention_norm.weight", gain(H))
        if rec:
            t(f"blk.{b}.attn_qkv.weight", mat(2 * kd + vd, H))
            t(f"blk.{b}.attn_gate.weight", mat(vd, H))
            t(f"blk.{b}.ssm_conv1d.weight", (rng.standard_normal((2 * kd + vd, s["conv"])) * 0.5).astype(np.float32))
            t(f"blk.{b}.ssm_dt.bias", (rng.standard_normal(s["value_heads"]) * 0.5).astype(np.float32))
            t(f"blk.{b}.ssm_a", (-np.exp(rng.uniform(0.0, np.log(16.0), s["value_heads"]))).astype(np.float32))
            t(f"blk.{b}.ssm_beta.weight", mat(s["value_heads"], H))
            t(f"blk.{b}.ssm_alpha.weight", mat(s["value_heads"], H))
            t(f"blk.{b}.ssm_norm.weight", gain(s["ssm_head"]))
            t(f"blk.{b}.ssm_out.weight", out_mat(H, vd))
        else:
            attention(b)
        t(f"blk.{b}.ffn_gate.weight", mat(s["ffn"], H))
        t(f"blk.{b}.ffn_up.weight", mat(s["ffn"], H))
        t(f"blk.{b}.ffn_down.weight", out_mat(H, s["ffn"]))

    for b in range(L):
        block(b, recurrent[b])
    for b in range(L, L + N):
        block(b, False)
        eh = mat(H, 2 * H)
        if planted:
            eh = np.concatenate([np.eye(H, dtype=np.float32), np.zeros((H, H), np.float32)], axis=1)
        t(f"blk.{b}.nextn.eh_proj.weight", eh)
        t(f"blk.{b}.nextn.enorm.weight", gain(H))
        t(f"blk.{b}.nextn.hnorm.weight", gain(H))
        t(f"blk.{b}.nextn.shared_head_norm.weight", gain(H))
    _finish(w)
    return s


def _reorder_v_heads(x, axis, num_k_heads, num_v_per_k, head_dim):
    """llama.cpp's converter's _LinearAttentionVReorderBase._reorder_v_heads
    in NumPy: value heads grouped by key head -> tiled."""
    import numpy as np
    shape = list(x.shape)
    y = x.reshape(shape[:axis] + [num_k_heads, num_v_per_k, head_dim] + shape[axis + 1:])
    return np.ascontiguousarray(np.swapaxes(y, axis, axis + 1)).reshape(shape)


def _group_v_heads(x, axis, num_k_heads, num_v_per_k, head_dim):
    """The inverse: tiled -> grouped by key head."""
    import numpy as np
    shape = list(x.shape)
    y = x.reshape(shape[:axis] + [num_v_per_k, num_k_heads, head_dim] + shape[axis + 1:])
    return np.ascontiguousarray(np.swapaxes(y, axis, axis + 1)).reshape(shape)


def _write_safetensors(path, tensors):
    """tensors: name -> float32 array (safetensors' layout, as Hugging Face's
    files hold them)."""
    import json
    import numpy as np
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, x in tensors.items():
        b = np.ascontiguousarray(x, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(x.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_qwen35_hf(out_dir, gguf_path, gguf_py_dir, shape=None):
    """The write_qwen35 file at `gguf_path` as the Hugging Face directory
    llama.cpp's converter (conversion/qwen.py, Qwen3_5TextModel) would turn
    into it: each of its steps undone (A_log = log(-A), the convolution
    [channels, 1, kernel], norm gains less 1 but the gated norm's, value
    heads grouped by key head, the text model under model.language_model.,
    the text config nested). Checks that the converter's own reorder takes
    the grouped heads back to the file's."""
    import json
    import numpy as np
    gguf = _gguf(gguf_py_dir)
    s = dict(QWEN35_SHAPE, **(shape or {}))
    reader = gguf.GGUFReader(gguf_path)
    t = {x.name: np.array(x.data, dtype=np.float32).reshape([int(d) for d in reversed(x.shape)]) for x in reader.tensors}
    L, nk, nv, hd = s["layers"], s["key_heads"], s["value_heads"], s["ssm_head"]
    per_k, kd = nv // nk, 2 * nk * s["ssm_head"]

    def grouped(x, axis, width):
        back = _group_v_heads(x, axis, nk, per_k, width)
        assert np.array_equal(_reorder_v_heads(back, axis, nk, per_k, width), x), "not the converter's inverse"
        return back

    p = "model.language_model."
    out = {p + "embed_tokens.weight": t["token_embd.weight"], p + "norm.weight": t["output_norm.weight"] - 1.0}
    tied = "output.weight" not in t
    if not tied:
        out["lm_head.weight"] = t["output.weight"]
    names = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
             "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
             "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
             "ssm_norm": "linear_attn.norm", "ssm_beta": "linear_attn.in_proj_b", "ssm_alpha": "linear_attn.in_proj_a",
             "attn_gate": "linear_attn.in_proj_z", "ssm_out": "linear_attn.out_proj",
             "attn_qkv": "linear_attn.in_proj_qkv"}
    for b in range(L):
        blk, hf = f"blk.{b}.", f"{p}layers.{b}."
        for g, h in names.items():
            if blk + g + ".weight" not in t:
                continue
            x = t[blk + g + ".weight"]
            if g in ("attn_norm", "post_attention_norm", "attn_q_norm", "attn_k_norm"):
                x = x - 1.0
            elif g == "attn_qkv":
                x = np.concatenate([x[:kd], grouped(x[kd:], 0, hd)], axis=0)
            elif g == "attn_gate":
                x = grouped(x, 0, hd)
            elif g in ("ssm_beta", "ssm_alpha"):
                x = grouped(x, 0, 1)
            elif g == "ssm_out":
                x = grouped(x, 1, hd)
            out[hf + h + ".weight"] = x
        if blk + "ssm_a" in t:
            out[hf + "linear_attn.A_log"] = grouped(np.log(-t[blk + "ssm_a"].astype(np.float64)).astype(np.float32), 0, 1)
            out[hf + "linear_attn.dt_bias"] = grouped(t[blk + "ssm_dt.bias"], 0, 1)
            conv = t[blk + "ssm_conv1d.weight"]  # [channels, kernel]
            conv = np.concatenate([conv[:kd], grouped(conv[kd:], 0, hd)], axis=0)
            out[hf + "linear_attn.conv1d.weight"] = conv.reshape(conv.shape[0], 1, conv.shape[1])
    os.makedirs(out_dir, exist_ok=True)
    _write_safetensors(os.path.join(out_dir, "model.safetensors"), out)
    recurrent = [(i + 1) % 4 != 0 for i in range(L)]
    text = dict(model_type="qwen3_5_text", hidden_size=s["hidden"], intermediate_size=s["ffn"], num_hidden_layers=L,
                num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"], head_dim=s["head_dim"],
                vocab_size=int(t["token_embd.weight"].shape[0]), rms_norm_eps=1e-6,
                max_position_embeddings=s["context"], hidden_act="silu", attn_output_gate=True,
                layer_types=["linear_attention" if r else "full_attention" for r in recurrent],
                full_attention_interval=4, linear_conv_kernel_dim=s["conv"], linear_key_head_dim=hd,
                linear_value_head_dim=hd, linear_num_key_heads=nk, linear_num_value_heads=nv,
                mtp_num_hidden_layers=s["nextn"],
                rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25,
                                     mrope_section=[11, 11, 10], mrope_interleaved=True))
    config = dict(architectures=["Qwen3_5ForConditionalGeneration"], model_type="qwen3_5", tie_word_embeddings=tied,
                  text_config=text, vision_config=dict(model_type="qwen3_5"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


# Llama 3 in small proportions, and an EAGLE-3 head for it reading the
# inputs of three of its layers.
LLAMA3_SHAPE = dict(hidden=256, ffn=768, layers=6, heads=4, kv_heads=2, context=4096)
EAGLE3_SHAPE = dict(hidden=256, ffn=512, heads=4, kv_heads=4, layers=(1, 3, 5), draft_vocab=None)


def _permute(w, n_head):
    """llama.cpp's LlamaModel.permute: Hugging Face's rotated halves into
    its adjacent pairs, for a query or key matrix of n_head heads."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_llama3(path, vocab_gguf, gguf_py_dir, seed=1, scale=0.02, shape=None, planted=False):
    """A Llama 3-shaped (llama) target of random F32 weights. planted: every
    layer's output projections zero, so each layer's input is the token's
    embedding and the next token a fixed permutation of the current one, as
    write_qwen35's planted target. Returns the shape, the permutation and
    the embedding."""
    import numpy as np
    gguf = _gguf(gguf_py_dir)
    s = dict(LLAMA3_SHAPE, **(shape or {}))
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    n_vocab = _copy_vocab(gguf, w, vocab_gguf)
    H, D = s["hidden"], s["hidden"] // s["heads"]
    w.add_context_length(s["context"])
    w.add_embedding_length(H)
    w.add_feed_forward_length(s["ffn"])
    w.add_block_count(s["layers"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_rope_dimension_count(D)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    mat, gain = _random(rng, scale)

    embed = (rng.standard_normal((n_vocab, H)) * (1.0 if planted else scale)).astype(np.float32)
    w.add_tensor("token_embd.weight", embed)
    w.add_tensor("output_norm.weight", gain(H))
    perm = rng.permutation(n_vocab)
    head = np.empty_like(embed)
    head[perm] = embed
    w.add_tensor("output.weight", head if planted else mat(n_vocab, H))
    kv = s["kv_heads"] * D
    for b in range(s["layers"]):
        w.add_tensor(f"blk.{b}.attn_norm.weight", gain(H))
        w.add_tensor(f"blk.{b}.attn_q.weight", _permute(mat(H, H), s["heads"]))
        w.add_tensor(f"blk.{b}.attn_k.weight", _permute(mat(kv, H), s["kv_heads"]))
        w.add_tensor(f"blk.{b}.attn_v.weight", mat(kv, H))
        w.add_tensor(f"blk.{b}.attn_output.weight", np.zeros((H, H), np.float32) if planted else mat(H, H))
        w.add_tensor(f"blk.{b}.ffn_norm.weight", gain(H))
        w.add_tensor(f"blk.{b}.ffn_gate.weight", mat(s["ffn"], H))
        w.add_tensor(f"blk.{b}.ffn_up.weight", mat(s["ffn"], H))
        w.add_tensor(f"blk.{b}.ffn_down.weight", np.zeros((H, s["ffn"]), np.float32) if planted else mat(H, s["ffn"]))
    _finish(w)
    return s, perm, embed


def write_eagle3(path, vocab_gguf, gguf_py_dir, target_hidden, seed=1, scale=0.02, shape=None, planted=None):
    """An EAGLE-3 head (eagle3) as llama.cpp's converter writes one: fc over
    three target layers' inputs, one decoder layer reading [embedding,
    features], its own head over a reduced draft vocabulary mapped to the
    target's by d2t (absolute ids, I64); the target's vocabulary, no
    token_embd (it reads the target's). planted: (permutation, embedding) of
    write_llama3's planted target: the layer then attends to its own row
    only and passes its token's normed embedding through, and the head
    scores each token by its predecessor's embedding, so its drafts are what
    the target says."""
    import numpy as np
    gguf = _gguf(gguf_py_dir)
    s = dict(EAGLE3_SHAPE, **(shape or {}))
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.EAGLE3])
    n_vocab = _copy_vocab(gguf, w, vocab_gguf)
    H, D = s["hidden"], s["hidden"] // s["heads"]
    nd = s["draft_vocab"] or n_vocab // 4
    w.add_context_length(4096)
    w.add_embedding_length(H)
    w.add_feed_forward_length(s["ffn"])
    w.add_block_count(1)
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_rope_dimension_count(D)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_target_layers(list(s["layers"]))
    w.add_target_hidden_size(target_hidden)
    # Planted: the residual is the features normed (RedHat's variant), so a
    # chain's own outputs do not pile up in it.
    w.add_norm_before_residual(planted is not None)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    mat, gain = _random(rng, scale)

    kv = s["kv_heads"] * D
    eye = np.concatenate([np.eye(H, dtype=np.float32), np.zeros((H, H), np.float32)], axis=1)
    w.add_tensor("fc.weight", np.zeros((H, 3 * target_hidden), np.float32) if planted else mat(H, 3 * target_hidden))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(H, np.float32) if planted else gain(H))
    w.add_tensor("blk.0.attn_norm_2.weight", np.ones(H, np.float32) if planted else gain(H))
    w.add_tensor("blk.0.attn_q.weight", _permute(eye * 8.0 if planted else mat(H, 2 * H), s["heads"]))
    w.add_tensor("blk.0.attn_k.weight", _permute(eye[:kv] * 8.0 if planted else mat(kv, 2 * H), s["kv_heads"]))
    w.add_tensor("blk.0.attn_v.weight", eye[:kv] if planted else mat(kv, 2 * H))
    # Planted: ten times the token's embedding, over the residual (the
    # features: zero from fc, the previous step's output when chaining).
    w.add_tensor("blk.0.attn_output.weight", np.eye(H, dtype=np.float32) * 10.0 if planted else mat(H, H))
    w.add_tensor("blk.0.ffn_norm.weight", gain(H))
    w.add_tensor("blk.0.ffn_gate.weight", mat(s["ffn"], H))
    w.add_tensor("blk.0.ffn_up.weight", mat(s["ffn"], H))
    w.add_tensor("blk.0.ffn_down.weight", np.zeros((H, s["ffn"]), np.float32) if planted else mat(H, s["ffn"]))
    w.add_tensor("output_norm.weight", np.ones(H, np.float32) if planted else gain(H))
    # The draft vocabulary: nd target ids, absolute (llama.cpp's converter
    # turns the checkpoint's offsets into them).
    d2t = np.sort(rng.choice(n_vocab, nd, replace=False)).astype(np.int64)
    out = mat(nd, H)
    if planted:
        perm, embed = planted
        d2t = rng.permutation(n_vocab).astype(np.int64)
        # Row i scores the token whose successor is d2t[i].
        inverse = np.empty_like(perm)
        inverse[perm] = np.arange(len(perm))
        out = embed[inverse[d2t]]
    w.add_tensor("output.weight", out.astype(np.float32))
    w.add_tensor("d2t", d2t, raw_dtype=gguf.GGMLQuantizationType.I64)
    _finish(w)
    return s


# Gemma 4 in small E2B-like proportions: three local layers to one global,
# global heads twice as wide with their own key-value heads and RoPE on a
# quarter of their pairs, the last half of the layers sharing the keys and
# values of the last local and global layers with their own (their MLPs
# twice as wide, as E2B's), per-layer inputs, and one global layer whose
# value is its key's projection (the larger models' attention_k_eq_v).
GEMMA4_SHAPE = dict(hidden=256, ffn=512, layers=8, pattern=4, heads=4, kv_heads=1, global_kv_heads=2, head_dim=64,
                    global_head_dim=128, per_layer=32, shared=4, window=16, softcap=30.0, k_eq_v=(3,), context=4096)
# Its assistant: a 128-wide decoder of one local and one global layer over
# the target's keys and values.
GEMMA4_ASSISTANT_SHAPE = dict(hidden=128, ffn=256, heads=4)


def _gemma4_kinds(s):
    return [(i + 1) % s["pattern"] != 0 for i in range(s["layers"])]


def _gemma4_rope_freqs(head_dim):
    """convert_hf_to_gguf's proportional RoPE on the global layers: a
    quarter of the pairs rotate, the rest get 1e30 divisors."""
    import numpy as np
    n_rot = int(head_dim * 0.25 / 2)
    return np.array([1.0] * n_rot + [1e30] * (head_dim // 2 - n_rot), np.float32)


def write_gemma4(path, vocab_gguf, gguf_py_dir, seed=1, scale=0.02, shape=None, planted=False):
    """A Gemma 4 (gemma4) file of random weights: F32 but the per-layer
    embedding (F16, as it is 262K x layers x size). planted: every branch's
    output projection zero and an untied head whose row perm[x] is x's
    embedding, so the next token after x is perm[x] (as write_qwen35's).
    Returns the shape, the permutation and the embedding."""
    import numpy as np
    gguf = _gguf(gguf_py_dir)
    s = dict(GEMMA4_SHAPE, **(shape or {}))
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GEMMA4])
    n_vocab = _copy_vocab(gguf, w, vocab_gguf)
    H, L, P = s["hidden"], s["layers"], s["per_layer"]
    local = _gemma4_kinds(s)
    first_shared = L - s["shared"]
    w.add_context_length(s["context"])
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_head_count(s["heads"])
    w.add_head_count_kv([s["kv_heads"] if sw else s["global_kv_heads"] for sw in local])
    w.add_feed_forward_length([s["ffn"] if i < first_shared else 2 * s["ffn"] for i in range(L)])
    w.add_key_length(s["global_head_dim"])
    w.add_value_length(s["global_head_dim"])
    w.add_key_length_swa(s["head_dim"])
    w.add_value_length_swa(s["head_dim"])
    w.add_rope_dimension_count(s["global_head_dim"])
    w.add_rope_dimension_count_swa(s["head_dim"])
    w.add_rope_freq_base(1000000.0)
    w.add_rope_freq_base_swa(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(s["window"])
    w.add_sliding_window_pattern(local)
    w.add_shared_kv_layers(s["shared"])
    w.add_embedding_length_per_layer_input(P)
    w.add_final_logit_softcapping(s["softcap"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    mat, gain = _random(rng, scale)

    def t(name, data):
        w.add_tensor(name, data)

    def out_mat(rows, cols):
        return np.zeros((rows, cols), np.float32) if planted else mat(rows, cols)

    embed = (rng.standard_normal((n_vocab, H)) * (1.0 if planted else scale)).astype(np.float32)
    t("token_embd.weight", embed)
    t("output_norm.weight", gain(H))
    perm = rng.permutation(n_vocab)
    if planted:
        head = np.empty_like(embed)
        head[perm] = embed
        t("output.weight", head)
    t("rope_freqs.weight", _gemma4_rope_freqs(s["global_head_dim"]))
    t("per_layer_token_embd.weight", (rng.standard_normal((n_vocab, L * P)) * 0.5).astype(np.float16))
    t("per_layer_model_proj.weight", mat(L * P, H))
    t("per_layer_proj_norm.weight", gain(P))
    for b in range(L):
        D = s["head_dim"] if local[b] else s["global_head_dim"]
        kv = (s["kv_heads"] if local[b] else s["global_kv_heads"]) * D
        ffn = s["ffn"] if b < first_shared else 2 * s["ffn"]
        t(f"blk.{b}.attn_norm.weight", gain(H))
        t(f"blk.{b}.attn_q.weight", mat(s["heads"] * D, H))
        t(f"blk.{b}.attn_q_norm.weight", gain(D))
        if b < first_shared:
            t(f"blk.{b}.attn_k.weight", mat(kv, H))
            t(f"blk.{b}.attn_k_norm.weight", gain(D))
            if b not in s["k_eq_v"]:
                t(f"blk.{b}.attn_v.weight", mat(kv, H))
        t(f"blk.{b}.attn_output.weight", out_mat(H, s["heads"] * D))
        t(f"blk.{b}.post_attention_norm.weight", gain(H))
        t(f"blk.{b}.ffn_norm.weight", gain(H))
        t(f"blk.{b}.ffn_gate.weight", mat(ffn, H))
        t(f"blk.{b}.ffn_up.weight", mat(ffn, H))
        t(f"blk.{b}.ffn_down.weight", out_mat(H, ffn))
        t(f"blk.{b}.post_ffw_norm.weight", gain(H))
        t(f"blk.{b}.inp_gate.weight", mat(P, H))
        t(f"blk.{b}.proj.weight", out_mat(H, P))
        t(f"blk.{b}.post_norm.weight", gain(H))
        t(f"blk.{b}.layer_output_scale.weight", rng.uniform(0.5, 1.5, 1).astype(np.float32))
    _finish(w)
    return s, perm, embed


def write_gemma4_assistant(path, vocab_gguf, gguf_py_dir, target_shape, seed=1, scale=0.02, shape=None, planted=None):
    """Gemma 4's assistant (gemma4-assistant) for a write_gemma4 target of
    `target_shape`, as llama.cpp's converter writes one: the target's
    embedding row (x sqrt(its hidden)) and hidden state projected in
    (nextn.pre_projection), query-only layers over the target's keys and
    values (its last local and global layers'), its own tied head, and the
    state it hands the next step projected out (nextn.post_projection); its
    embedding F16. planted: (permutation, embedding) of write_gemma4's
    planted target: the projection passes the embedding's first dims alone,
    every branch is zero, and head row perm[x] is those dims of x's
    embedding, so it drafts what the target says."""
    import numpy as np
    gguf = _gguf(gguf_py_dir)
    s = dict(GEMMA4_ASSISTANT_SHAPE, **(shape or {}))
    t_s = target_shape
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GEMMA4_ASSISTANT])
    n_vocab = _copy_vocab(gguf, w, vocab_gguf)
    H, HT = s["hidden"], t_s["hidden"]
    local = [True, False]
    w.add_context_length(t_s["context"])
    w.add_embedding_length(H)
    w.add_embedding_length_out(HT)
    w.add_block_count(len(local))
    w.add_nextn_predict_layers(len(local))
    w.add_head_count(s["heads"])
    w.add_head_count_kv([t_s["kv_heads"] if sw else t_s["global_kv_heads"] for sw in local])
    w.add_feed_forward_length(s["ffn"])
    w.add_key_length(t_s["global_head_dim"])
    w.add_value_length(t_s["global_head_dim"])
    w.add_key_length_swa(t_s["head_dim"])
    w.add_value_length_swa(t_s["head_dim"])
    w.add_rope_dimension_count(t_s["global_head_dim"])
    w.add_rope_dimension_count_swa(t_s["head_dim"])
    w.add_rope_freq_base(1000000.0)
    w.add_rope_freq_base_swa(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(t_s["window"])
    w.add_sliding_window_pattern(local)
    w.add_shared_kv_layers(0)
    w.add_embedding_length_per_layer_input(0)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    mat, gain = _random(rng, scale)

    def t(name, data):
        w.add_tensor(name, data)

    if planted:
        perm, embed = planted
        head = np.empty((n_vocab, H), np.float32)
        head[perm] = embed[:, :H]
        pre = np.concatenate([np.eye(H, HT, dtype=np.float32), np.zeros((H, HT), np.float32)], axis=1)
    else:
        head = rng.standard_normal((n_vocab, H)) * scale
        pre = mat(H, 2 * HT)
    t("token_embd.weight", head.astype(np.float16))
    t("output_norm.weight", gain(H))
    t("nextn.pre_projection.weight", pre)
    t("nextn.post_projection.weight", mat(HT, H))
    t("rope_freqs.weight", _gemma4_rope_freqs(t_s["global_head_dim"]))
    for b, sw in enumerate(local):
        D = t_s["head_dim"] if sw else t_s["global_head_dim"]
        t(f"blk.{b}.attn_norm.weight", gain(H))
        t(f"blk.{b}.attn_q.weight", mat(s["heads"] * D, H))
        t(f"blk.{b}.attn_q_norm.weight", gain(D))
        t(f"blk.{b}.attn_output.weight", np.zeros((H, s["heads"] * D), np.float32) if planted else
          mat(H, s["heads"] * D))
        t(f"blk.{b}.post_attention_norm.weight", gain(H))
        t(f"blk.{b}.ffn_norm.weight", gain(H))
        t(f"blk.{b}.ffn_gate.weight", mat(s["ffn"], H))
        t(f"blk.{b}.ffn_up.weight", mat(s["ffn"], H))
        t(f"blk.{b}.ffn_down.weight", np.zeros((H, s["ffn"]), np.float32) if planted else mat(H, s["ffn"]))
        t(f"blk.{b}.post_ffw_norm.weight", gain(H))
        t(f"blk.{b}.layer_output_scale.weight", rng.uniform(0.5, 1.5, 1).astype(np.float32))
    _finish(w)
    return s


if __name__ == "__main__":
    # write_qwen35 OUT.gguf VOCAB.gguf GGUF_PY_DIR [SEED]
    write_qwen35(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 1)
    print(os.path.getsize(sys.argv[1]))
