# Repository: https://github.com/mlcommons/algorithmic-efficiency
# Commit (fix, merge of PR #251): 60166094ad16c4a3c08317948d7ef8f392451b92; before: 593b5bb609d072a359b2e5eb46a3f8b331117347
# Files excerpted: algorithmic_efficiency/logger_utils.py (get_log_dir),
#                  algorithmic_efficiency/checkpoint_utils.py (save_checkpoint),
#                  submission_runner.py (train_once, score_submission_on_workload, main)
import logging
import os
import time

import torch
import torch.distributed as dist

from algorithmic_efficiency.pytorch_utils import pytorch_setup

USE_PYTORCH_DDP, RANK, DEVICE, N_GPUS = pytorch_setup()


# ---- algorithmic_efficiency/logger_utils.py ----
def get_log_dir(experiment_dir, workload, framework, experiment_name, resume_last_run):
  if RANK != 0:
    return

  # Construct path to experiment workload directory.
  experiment_dir = os.path.expanduser(experiment_dir)
  workload_dir_name = f'{workload}_{framework}'
  experiment_path = os.path.join(experiment_dir, experiment_name, workload_dir_name)
  ...
  return experiment_path


# ---- algorithmic_efficiency/checkpoint_utils.py ----
def save_checkpoint(framework, optimizer_state, model_params, model_state, train_state,
                    eval_results, global_step, preemption_count, checkpoint_dir):
  checkpoint_state = dict(
      model_params=model_params.state_dict(),
      optimizer_state=optimizer_state,
      model_state=model_state,
      train_state=train_state,
      eval_results=tuple(eval_results),
      global_step=global_step,
      preemption_count=preemption_count)
  save_path = os.path.join(checkpoint_dir, 'checkpoint')
  torch.save(checkpoint_state, save_path)

  logging.info(f'Saved checkpoint to {save_path}.')


# ---- submission_runner.py ----
def train_once(workload, global_batch_size, global_eval_batch_size, data_dir,
               imagenet_v2_data_dir, init_optimizer_state, update_params,
               data_selection, hyperparameters, rng, profiler,
               max_global_steps=None, log_dir=None, tokenizer_vocab_path=None):
  ...
  train_state = {'goal_reached': False, 'is_time_remaining': True,
                 'last_eval_time': 0, 'accumulated_submission_time': 0,
                 'training_complete': False}
  global_step = 0
  eval_results = []
  preemption_count = 0

  # Loggers and checkpoint setup.
  if log_dir is not None:
    ...  # checkpoint_utils.maybe_restore_checkpoint(...), write meta data / flags
    metrics_logger = set_up_loggers(log_dir, FLAGS)
    workload.attach_metrics_logger(metrics_logger)

  if USE_PYTORCH_DDP:
    # Make sure all processes start training at the same time.
    dist.barrier()

  while train_state['is_time_remaining'] and \
      not train_state['goal_reached'] and \
      not train_state['training_complete']:
    start_time = time.time()
    optimizer_state, model_params, model_state = update_params(...)
    global_step += 1
    if (max_global_steps is not None) and (global_step == max_global_steps):
      train_state['training_complete'] = True
    if USE_PYTORCH_DDP:
      # Make sure all processes run eval after the same step when using DDP.
      dist.barrier()
    current_time = time.time()
    train_state['accumulated_submission_time'] += current_time - start_time
    # Check if submission is eligible for an untimed eval.
    if ((current_time - train_state['last_eval_time']) >=
        workload.eval_period_time_sec or train_state['training_complete']):
      try:
        latest_eval_result = workload.eval_model(global_eval_batch_size,
                                                 model_params, model_state, ...)
        eval_results.append((global_step, latest_eval_result))
        train_state['goal_reached'] = workload.has_reached_goal(latest_eval_result)

        if log_dir is not None:
          metrics_logger.append_scalar_metrics(
              latest_eval_result, global_step=global_step,
              preemption_count=preemption_count)
          save_checkpoint(
              framework='pytorch',
              optimizer_state=optimizer_state,
              model_params=model_params,
              model_state=model_state,
              train_state=train_state,
              eval_results=eval_results,
              global_step=global_step,
              preemption_count=preemption_count,
              checkpoint_dir=log_dir)

        if USE_PYTORCH_DDP:
          # Make sure all processes finish evaluation at the same time.
          dist.barrier()

        train_state['last_eval_time'] = time.time()
      except RuntimeError as e:
        logging.exception(f'Eval step {global_step} error.\n')

  metrics = {'eval_results': eval_results, 'global_step': global_step}
  if USE_PYTORCH_DDP:
    # Sync final score (accumulated training time); choose highest, i.e. worst.
    score_tensor = torch.tensor(
        train_state['accumulated_submission_time'], device=DEVICE)
    dist.all_reduce(score_tensor, op=dist.ReduceOp.MAX)
    train_state['accumulated_submission_time'] = score_tensor.item()
  return train_state['accumulated_submission_time'], metrics


def score_submission_on_workload(workload, profiler, max_global_steps, log_dir):
  ...
  score, _ = train_once(workload, ..., max_global_steps=max_global_steps,
                        log_dir=log_dir)
  return score


def main(_):
  workload = ...
  logging_dir_path = get_log_dir(FLAGS.experiment_dir, FLAGS.workload,
                                 FLAGS.framework, FLAGS.experiment_name,
                                 FLAGS.resume_last_run)
  score = score_submission_on_workload(workload, profiler, FLAGS.max_global_steps,
                                       logging_dir_path)
