# lyuwenyu/RT-DETR @ 199fc382f53abbfb5c1804c97b0e8b204e3cb8d0 (commit before the fix 068dfde, PR #684)
# Excerpt: rtdetrv2_pytorch/src/{zoo/rtdetr/denoising.py, zoo/rtdetr/rtdetrv2_decoder.py,
#          zoo/rtdetr/rtdetrv2_criterion.py, solver/det_engine.py, misc/dist_utils.py}
import torch
import torch.distributed
import torch.nn as nn


# ---- rtdetrv2_pytorch/src/zoo/rtdetr/denoising.py ----
def get_contrastive_denoising_training_group(targets,
                                             num_classes,
                                             num_queries,
                                             class_embed,
                                             num_denoising=100,
                                             label_noise_ratio=0.5,
                                             box_noise_scale=1.0,):
    """cnd"""
    if num_denoising <= 0:
        return None, None, None, None

    num_gts = [len(t['labels']) for t in targets]
    device = targets[0]['labels'].device

    max_gt_num = max(num_gts)
    if max_gt_num == 0:
        return None, None, None, None

    num_group = num_denoising // max_gt_num
    num_group = 1 if num_group == 0 else num_group
    bs = len(num_gts)
    input_query_class = torch.full([bs, max_gt_num], num_classes, dtype=torch.int32, device=device)
    # ... noise, padding, attention mask ...
    input_query_logits = class_embed(input_query_class)
    input_query_bbox_unact = torch.zeros([bs, max_gt_num * 2 * num_group, 4], device=device)
    attn_mask = None
    dn_meta = {"dn_positive_idx": None, "dn_num_group": num_group, "dn_num_split": [max_gt_num * 2 * num_group, num_queries]}
    return input_query_logits, input_query_bbox_unact, attn_mask, dn_meta


# ---- rtdetrv2_pytorch/src/zoo/rtdetr/rtdetrv2_decoder.py ----
class RTDETRTransformerv2(nn.Module):
    def forward(self, feats, targets=None):
        memory, spatial_shapes = self._get_encoder_input(feats)

        # prepare denoising training
        if self.training and self.num_denoising > 0:
            denoising_logits, denoising_bbox_unact, attn_mask, dn_meta = \
                get_contrastive_denoising_training_group(targets, \
                    self.num_classes,
                    self.num_queries,
                    self.denoising_class_embed,
                    num_denoising=self.num_denoising,
                    label_noise_ratio=self.label_noise_ratio,
                    box_noise_scale=self.box_noise_scale, )
        else:
            denoising_logits, denoising_bbox_unact, attn_mask, dn_meta = None, None, None, None

        init_ref_contents, init_ref_points_unact, enc_topk_bboxes_list, enc_topk_logits_list = \
            self._get_decoder_input(memory, spatial_shapes, denoising_logits, denoising_bbox_unact)
        out_bboxes, out_logits = self.decoder(init_ref_contents, init_ref_points_unact, memory,
                                              spatial_shapes, self.dec_bbox_head, self.dec_score_head,
                                              self.query_pos_head, attn_mask=attn_mask)

        if self.training and dn_meta is not None:
            dn_out_bboxes, out_bboxes = torch.split(out_bboxes, dn_meta['dn_num_split'], dim=2)
            dn_out_logits, out_logits = torch.split(out_logits, dn_meta['dn_num_split'], dim=2)

        out = {'pred_logits': out_logits[-1], 'pred_boxes': out_bboxes[-1]}
        if self.training and self.aux_loss:
            out['aux_outputs'] = self._set_aux_loss(out_logits[:-1], out_bboxes[:-1])
            if dn_meta is not None:
                out['dn_aux_outputs'] = self._set_aux_loss(dn_out_logits, dn_out_bboxes)
                out['dn_meta'] = dn_meta
        return out


# ---- rtdetrv2_pytorch/src/zoo/rtdetr/rtdetrv2_criterion.py ----
class RTDETRCriterionv2(nn.Module):
    def forward(self, outputs, targets, **kwargs):
        losses = {}
        # ... main and aux losses ...
        # In case of cdn auxiliary losses. For rtdetr
        if 'dn_aux_outputs' in outputs:
            assert 'dn_meta' in outputs, ''
            indices = self.get_cdn_matched_indices(outputs['dn_meta'], targets)
            for i, aux_outputs in enumerate(outputs['dn_aux_outputs']):
                for loss in self.losses:
                    l_dict = self.get_loss(loss, aux_outputs, targets, indices, 1.0)
                    l_dict = {k + f'_dn_{i}': v for k, v in l_dict.items()}
                    losses.update(l_dict)
        return losses


# ---- rtdetrv2_pytorch/src/misc/dist_utils.py ----
def reduce_dict(data, avg=True):
    world_size = torch.distributed.get_world_size()
    if world_size < 2:
        return data
    with torch.no_grad():
        keys, values = [], []
        for k in sorted(data.keys()):
            keys.append(k)
            values.append(data[k])
        values = torch.stack(values, dim=0)
        torch.distributed.all_reduce(values)
        if avg is True:
            values /= world_size
        return {k: v for k, v in zip(keys, values)}


# ---- rtdetrv2_pytorch/src/solver/det_engine.py ----
def train_one_epoch(model, criterion, data_loader, optimizer, device, epoch, max_norm=0, **kwargs):
    model.train()   # model is wrapped in torch.nn.parallel.DistributedDataParallel
    criterion.train()
    for i, (samples, targets) in enumerate(data_loader):
        samples = samples.to(device)
        targets = [{k: v.to(device) for k, v in t.items()} for t in targets]

        outputs = model(samples, targets=targets)
        loss_dict = criterion(outputs, targets)

        loss: torch.Tensor = sum(loss_dict.values())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        loss_dict_reduced = reduce_dict(loss_dict)
        loss_value = sum(loss_dict_reduced.values())
