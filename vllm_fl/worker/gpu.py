"""`WorkerFL`: the worker of `vllm_fl.platform.cuda.PlatformFL`, vLLM's GPU worker plus the
plugin's steps (`vllm_fl.worker`)."""

from __future__ import annotations

from vllm.v1.worker.gpu_worker import Worker

from vllm_fl.worker import (
    finish_verification,
    log_model_ops,
    reload_following,
    start_verification,
)


class WorkerFL(Worker):
    """vLLM's GPU worker; `init_device` also prepares the process for the plugin's layers,
    `compile_or_warm_up_model` also warms the MoE layers' kernels up."""

    def init_device(self) -> None:
        super().init_device()
        from vllm_fl.platform import route_unreplaced_ops_to_cuda
        from vllm_fl.registration import prepare_model_process

        route_unreplaced_ops_to_cuda()
        prepare_model_process(self.vllm_config)

    def compile_or_warm_up_model(self):
        result = super().compile_or_warm_up_model()
        from vllm_fl import moe

        moe.warm_up(self.get_model(), self.scheduler_config.max_num_batched_tokens)
        start_verification(self)
        return result

    def load_model(self, *args, **kwargs) -> None:
        super().load_model(*args, **kwargs)
        log_model_ops(self.get_model())

    def reload_weights(self, *args, **kwargs) -> None:
        reload_following(self, super().reload_weights, args, kwargs)

    def shutdown(self) -> None:
        finish_verification()
        super().shutdown()
