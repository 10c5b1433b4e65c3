"""What the trainers (scalesweep/train/, Python 3.8 in the containers) and the analysis share: the
record contract, the framework registry, the GPUs' peak throughput and files written whole. Standard
library only, and importing no other part of scalesweep."""
