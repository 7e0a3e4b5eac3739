// Every fuzz target, for the replay program (X-macro).
HOTLOOP_FUZZ_TARGET(idx)
HOTLOOP_FUZZ_TARGET(yaml_config)
HOTLOOP_FUZZ_TARGET(overrides)
HOTLOOP_FUZZ_TARGET(csv)
HOTLOOP_FUZZ_TARGET(png)
HOTLOOP_FUZZ_TARGET(jpeg)
HOTLOOP_FUZZ_TARGET(token)
HOTLOOP_FUZZ_TARGET(checkpoint)
