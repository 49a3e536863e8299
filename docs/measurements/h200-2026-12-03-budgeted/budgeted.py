"""Device probe: compiled scripts run under a budget with history recorded (why advise's minimum budget differs)."""
import json, os, subprocess, sys, tempfile, time, concurrent.futures as cf
OUT = os.environ["OUT"]
MiB = 1 << 20
probes = [("cmp_timm_vit_s", 2592), ("cmp_timm_vit_s", 2606), ("cmp_hf_llama_bf16", 2180),
          ("cmp_hf_llama_bf16", 2182), ("cmp_hf_mistral_bf16", 2265), ("cmp_hf_mistral_bf16", 2263)]
def one(p):
    name, mib = p
    tag = "%s_%d" % (name, mib)
    cache = tempfile.mkdtemp(prefix="ind-")
    res = os.path.join(OUT, tag + ".result.json")
    spec = {"script": "tests/data/predict/compiled/scripts/%s.py" % name, "args": [], "budget": mib * MiB,
            "record_to": os.path.join(OUT, tag), "result": res, "fake": False, "labelled": False}
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, OMP_NUM_THREADS="2")
    for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE"):
        env.pop(k, None)
    t0 = time.time()
    r = subprocess.run([sys.executable, "scripts/twins/predict_record.py", "--child", json.dumps(spec)], env=env,
                       capture_output=True, text=True, timeout=400)
    with open(os.path.join(OUT, tag + ".log"), "w") as f:
        f.write("rc %d wall %.1f\n%s\n%s" % (r.returncode, time.time() - t0, r.stdout[-5000:], r.stderr[-5000:]))
    try:
        os.unlink(os.path.join(OUT, tag + ".pickle"))
    except OSError:
        pass
    return tag
with cf.ThreadPoolExecutor(6) as ex:
    for t in ex.map(one, probes):
        print("done", t, flush=True)
