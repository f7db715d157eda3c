# Repository: https://github.com/allenai/allennlp-models
# Commit (before fix): 54ccc828ab24c9cbfa21751cfe795e898626573c
# Files excerpted: allennlp_models/rc/metrics/squad_em_and_f1.py (SquadEmAndF1.__call__),
#                  allennlp_models/rc/models/transformer_qa.py (TransformerQA.forward tail, _collect_best_span_strings),
#                  allennlp/training/trainer.py @ allenai/allennlp 4183a49c9c (validation loop run by every rank)
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist
from allennlp.common.util import is_distributed
from allennlp.models.model import Model
from allennlp.training.metrics.metric import Metric
from allennlp_models.rc.models.utils import get_best_span
from allennlp_models.rc.tools import squad


# ---- allennlp_models/rc/metrics/squad_em_and_f1.py ----
@Metric.register("squad")
class SquadEmAndF1(Metric):
    def __init__(self) -> None:
        self._total_em = 0.0
        self._total_f1 = 0.0
        self._count = 0

    def __call__(self, best_span_string, answer_strings):
        exact_match = squad.metric_max_over_ground_truths(
            squad.compute_exact, best_span_string, answer_strings
        )
        f1_score = squad.metric_max_over_ground_truths(
            squad.compute_f1, best_span_string, answer_strings
        )

        count = 1
        if is_distributed():
            if dist.get_backend() == "nccl":
                device = torch.cuda.current_device()
            else:
                device = torch.device("cpu")
            # Converting bool to int here, since we want to count the number of exact matches.
            _exact_match = torch.tensor(exact_match, dtype=torch.int).to(device)
            _f1_score = torch.tensor(f1_score, dtype=torch.double).to(device)
            _count = torch.tensor(count).to(device)
            dist.all_reduce(_exact_match, op=dist.ReduceOp.SUM)
            dist.all_reduce(_f1_score, op=dist.ReduceOp.SUM)
            dist.all_reduce(_count, op=dist.ReduceOp.SUM)
            exact_match = _exact_match.item()
            f1_score = _f1_score.item()
            count = _count.item()

        self._total_em += exact_match
        self._total_f1 += f1_score
        self._count += count


# ---- allennlp_models/rc/models/transformer_qa.py ----
@Model.register("transformer_qa")
class TransformerQA(Model):
    def __init__(self, vocab, transformer_model_name: str = "bert-base-cased", **kwargs) -> None:
        super().__init__(vocab, **kwargs)
        ...
        self._per_instance_metrics = SquadEmAndF1()

    def forward(self, question_with_context, context_span, cls_index=None, answer_span=None,
                metadata=None) -> Dict[str, torch.Tensor]:
        ...
        best_spans = get_best_span(span_start_logits, span_end_logits)
        output_dict = {"span_start_logits": span_start_logits, "span_end_logits": span_end_logits}

        # Gather the string of the best span and compute the EM and F1 against the gold span,
        # if given.
        if not self.training and metadata is not None:
            (
                output_dict["best_span_str"],
                output_dict["best_span"],
            ) = self._collect_best_span_strings(best_spans, context_span, metadata, cls_index)

        return output_dict

    def _collect_best_span_strings(
        self,
        best_spans: torch.Tensor,
        context_span: torch.IntTensor,
        metadata: List[Dict[str, Any]],
        cls_index: Optional[torch.LongTensor],
    ) -> Tuple[List[str], torch.Tensor]:
        _best_spans = best_spans.detach().cpu().numpy()

        best_span_strings = []
        for (metadata_entry, best_span, cspan, cls_ind) in zip(
            metadata, _best_spans, context_span, cls_index or (0 for _ in range(len(metadata)))
        ):
            if best_span[0] == cls_ind:
                # Predicting [CLS] is interpreted as predicting the question as unanswerable.
                best_span_string = ""
                best_span[0], best_span[1] = -1, -1
            else:
                best_span -= int(cspan[0])
                assert np.all(best_span >= 0)
                ...
                best_span_string = metadata_entry["context"][character_start:character_end]

            best_span_strings.append(best_span_string)

            answers = metadata_entry.get("answers")
            if answers:
                self._per_instance_metrics(best_span_string, answers)

        return best_span_strings, best_spans


# ---- allennlp/training/trainer.py (GradientDescentTrainer, trimmed) ----
class GradientDescentTrainer:
    def batch_outputs(self, batch, for_training: bool) -> Dict[str, torch.Tensor]:
        output_dict = self._pytorch_model(**batch)
        ...
        return output_dict

    def _validation_loss(self, epoch: int):
        self._pytorch_model.eval()
        done_early = False
        for batch in self._validation_data_loader:
            if self._distributed:
                # Check whether the other workers have stopped already (due to differing amounts of
                # data in each). If so, we can't proceed because we would hang when we hit the
                # barrier implicit in Model.forward.
                done = torch.tensor(0, device=self.cuda_device)
                torch.distributed.all_reduce(done, torch.distributed.ReduceOp.SUM)
                if done.item() > 0:
                    done_early = True
                    break

            batch_outputs = self.batch_outputs(batch, for_training=False)
            ...
