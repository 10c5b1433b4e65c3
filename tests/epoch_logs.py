"""Our trainers' records written by hand, for tests whose numbers are computed by hand."""

import json


def record(kind, **fields):
    return ":::SCALESWEEP " + json.dumps({"record": kind, "schema": 1, **fields})


def write_epochs_log(path, gpus, seconds, framework="pytorch", model="vit_tiny", images=1024,
                     protocol="epochs", **header):
    """A finished run of the epochs protocol: one epoch record per entry of `seconds` (each of
    `images` images), the header's keys overridable."""
    fields = dict(framework=framework, model=model, dataset="d", gpus=gpus, world_size=gpus, nodes=1,
                  per_gpu_batch=16, global_batch=16 * gpus, epochs=len(seconds), images_per_epoch=images,
                  protocol=protocol, device_kind="cpu")
    lines = [record("header", **{**fields, **header})]
    lines += [record("epoch", epoch=number, images=images, seconds=time_s, throughput_img_s=images / time_s)
              for number, time_s in enumerate(seconds, 1)]
    lines.append(record("summary", status="ok", epochs=len(seconds), total_time_s=sum(seconds)))
    path.write_text("\n".join(lines) + "\n")
    return path
