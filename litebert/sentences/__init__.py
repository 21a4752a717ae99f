"""Sentence encoders beyond labelled pairs: sentence-transformers directories read and written (`directories`),
STS scoring on human judgments (`sts`), distillation from a teacher's vectors (`distill`) and silver pairs
labelled by a cross-encoder (`silver`). The S-ALBERT model itself (pooling, file names) is `litebert.sentence`
in the model core, so that pipelines and the server load it without this stage; the `embed` verb drives it."""
