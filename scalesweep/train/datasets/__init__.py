"""The datasets the trainers read and the workflow's data rule makes: the CIFAR-10 pickle format
(`cifar.py`, read by the TensorFlow backend) and the synthetic datasets' makers (`make_cifar.py`,
`make_imagefolder.py`, run as scripts/make_cifar.py and scripts/make_imagefolder.py). numpy, PIL
and the standard library only."""
