"""Real tenants of the benchmark's latency phase (--latency-tenants real; PyTorch on a real GPU),
built from configurations with the `transformers` package, random weights (no download):

latency tenants, one request at a time (torch_tenant.py's latency protocol; a request ends with
a synchronisation, which is what a serving loop waits for):
  encoder   a BERT-base-like encoder (6 layers, hidden 768, 12 heads), one forward at batch 1
            over 128 tokens, bf16, inference mode
  llm       an LLM-style decode step: a Llama-like decoder (8 layers, hidden 1024, 16 heads, 4 KV
            heads) produces one token at batch 1 against a KV cache of 256 tokens, which is cropped
            back to 256 after each step so that every request costs the same

batch kinds (torch_tenant.py's throughput protocol):
  tftrain   a training step of the Llama-like decoder (batch 8 x 512 tokens, causal-LM loss),
            AdamW, bf16 autocast; the unit is one step
  compiled  torch.compile(mode="reduce-overhead") of an 8-layer 4096-wide bf16 MLP at batch 1024,
            inference: the compiled step replays a CUDA graph; the unit is one call

The launch-bound loop of tiny elementwise kernels and the memory-bound copy are torch_tenant.py's
"eager" and the driver-API client's copy. Every builder returns (unit, units per sync, unit
name); latency builders return (request, name, between) where between() runs after a request,
outside its timing. Nothing here runs on a measured path except the units themselves."""

LATENCY_MODES = ("encoder", "llm")
BATCH_MODES = ("tftrain", "compiled")
ENCODER_TOKENS, LLM_CONTEXT = 128, 256


def _llama_config(transformers):
    return transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                                    num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                                    max_position_embeddings=2048)


def make_latency(torch, mode):
    """(request, name, between): one request of `mode` (ends synchronised)."""
    import transformers  # noqa: PLC0415 - only the real tenants need it
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    if mode == "encoder":
        cfg = transformers.BertConfig(hidden_size=768, num_hidden_layers=6, num_attention_heads=12,
                                      intermediate_size=3072, vocab_size=30522)
        model = transformers.BertModel(cfg).to(dev, dtype=torch.bfloat16).eval()
        ids = torch.randint(0, cfg.vocab_size, (1, ENCODER_TOKENS), device=dev)
        mask = torch.ones_like(ids)

        def request():
            with torch.inference_mode():
                model(input_ids=ids, attention_mask=mask)
            torch.cuda.synchronize()
        return request, "encoder request", None
    if mode != "llm":
        raise ValueError("no latency tenant %s" % mode)
    model = transformers.LlamaForCausalLM(_llama_config(transformers)).to(dev, dtype=torch.bfloat16).eval()
    prompt = torch.randint(0, 32000, (1, LLM_CONTEXT), device=dev)
    state = {}

    def prefill():
        with torch.inference_mode():
            out = model(input_ids=prompt, use_cache=True)
        state["cache"], state["tok"], state["steps"] = out.past_key_values, prompt[:, -1:], 0

    prefill()
    can_crop = hasattr(state["cache"], "crop")

    def request():
        with torch.inference_mode():
            out = model(input_ids=state["tok"], past_key_values=state["cache"], use_cache=True)
            state["tok"] = out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        state["cache"] = out.past_key_values

    def between():
        # Every step costs the same: the cache goes back to its prompt length (or, where this
        # transformers' cache cannot be cropped, the prompt is prefilled again every 64 steps).
        state["steps"] += 1
        if can_crop:
            with torch.inference_mode():
                state["cache"].crop(LLM_CONTEXT)
        elif state["steps"] >= 64:
            prefill()
            torch.cuda.synchronize()
    return request, "decode step", between


def make_batch(torch, mode):
    """(unit, units per sync, unit name) of a batch kind."""
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    if mode == "tftrain":
        import transformers  # noqa: PLC0415
        model = transformers.LlamaForCausalLM(_llama_config(transformers)).to(dev).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = torch.randint(0, 32000, (8, 512), device=dev)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
        return step, 2, "train step"
    if mode == "compiled":
        layers = [m for _ in range(8) for m in (torch.nn.Linear(4096, 4096), torch.nn.GELU())]
        model = torch.nn.Sequential(*layers).to(dev, dtype=torch.bfloat16).eval()
        x = torch.randn(1024, 4096, device=dev, dtype=torch.bfloat16)
        fn = torch.compile(model, mode="reduce-overhead")

        def call():
            with torch.no_grad():
                fn(x)
        for _ in range(3):  # compile, record, then replay: the graph exists before --ready
            call()
        return call, 8, "compiled call"
    raise ValueError("no batch kind %s" % mode)
