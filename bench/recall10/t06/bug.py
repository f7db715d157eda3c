# audiolm_pytorch/trainer.py — SoundStreamTrainer.train_step (excerpt)
from functools import partial
from contextlib import nullcontext

import torch
import torchaudio
from torch import nn
from accelerate import Accelerator


def cycle(dl):
    while True:
        for data in dl:
            yield data


class SoundStreamTrainer(nn.Module):

    def __init__(self, soundstream, dl, valid_dl, optim, results_folder,
                 save_results_every=100, save_model_every=1000,
                 grad_accum_every=1, use_ema=True, ema_soundstream=None):
        super().__init__()
        self.accelerator = Accelerator()
        self.soundstream = soundstream
        self.ema_soundstream = ema_soundstream
        self.use_ema = use_ema
        self.optim = optim
        self.results_folder = results_folder
        self.save_results_every = save_results_every
        self.save_model_every = save_model_every
        self.grad_accum_every = grad_accum_every
        self.register_buffer('steps', torch.Tensor([0]))

        self.valid_dl = valid_dl
        (self.soundstream, self.optim, self.dl) = self.accelerator.prepare(
            self.soundstream, self.optim, dl)
        self.dl_iter = cycle(self.dl)
        self.valid_dl_iter = cycle(self.valid_dl)

    @property
    def is_main(self):
        return self.accelerator.is_main_process

    @property
    def unwrapped_soundstream(self):
        return self.accelerator.unwrap_model(self.soundstream)

    def print(self, msg):
        self.accelerator.print(msg)

    def save(self, path):
        torch.save(self.unwrapped_soundstream.state_dict(), path)

    def train_step(self):
        device = self.accelerator.device
        steps = int(self.steps.item())

        self.soundstream.train()

        for i in range(self.grad_accum_every):
            is_last = i == (self.grad_accum_every - 1)
            context = partial(self.accelerator.no_sync, self.soundstream) if not is_last else nullcontext

            wave, = next(self.dl_iter)
            wave = wave.to(device)

            with self.accelerator.autocast(), context():
                loss = self.soundstream(wave)
                self.accelerator.backward(loss / self.grad_accum_every)

        self.optim.step()
        self.optim.zero_grad()

        self.accelerator.wait_for_everyone()

        if self.is_main and self.use_ema:
            self.ema_soundstream.update()

        self.accelerator.wait_for_everyone()

        if self.is_main and not (steps % self.save_results_every):
            models = [(self.unwrapped_soundstream, str(steps))]
            if self.use_ema:
                models.append((self.ema_soundstream.ema_model, f'{steps}.ema'))

            wave, = next(self.valid_dl_iter)
            wave = wave.to(device)

            for model, label in models:
                model.eval()
                model = model.to(device)

                with torch.inference_mode():
                    recons = model(wave, return_recons_only = True)

                for ind, recon in enumerate(recons.unbind(dim = 0)):
                    filename = str(self.results_folder / f'sample_{label}.flac')
                    torchaudio.save(filename, recon.cpu().detach(), self.unwrapped_soundstream.target_sample_hz)

            self.print(f'{steps}: saving to {str(self.results_folder)}')

        self.accelerator.wait_for_everyone()

        if self.is_main and not (steps % self.save_model_every):
            model_path = str(self.results_folder / f'soundstream.{steps}.pt')
            self.save(model_path)

        self.steps += 1
        return loss
