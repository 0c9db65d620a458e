package storage

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/autocapture/autocapture/vocab"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// The object tags a Put writes. Tags, unlike user metadata, can be written
// after the upload, when the hashes of a streamed object are known.
const (
	tagSHA256         = "autocapture-sha256"
	tagSize           = "autocapture-size"
	tagOriginalSHA256 = "autocapture-original-sha256"
	tagOriginalSize   = "autocapture-original-size"
)

// writeTags records obj's hashes and sizes on the stored object.
func (s *S3) writeTags(ctx context.Context, obj vocab.Object) error {
	tags := []types.Tag{
		{Key: aws.String(tagSHA256), Value: aws.String(obj.SHA256)},
		{Key: aws.String(tagSize), Value: aws.String(strconv.FormatInt(obj.Size, 10))},
	}
	if obj.ContentEncoding != "" {
		tags = append(tags,
			types.Tag{Key: aws.String(tagOriginalSHA256), Value: aws.String(obj.OriginalSHA256)},
			types.Tag{Key: aws.String(tagOriginalSize), Value: aws.String(strconv.FormatInt(obj.OriginalSize, 10))})
	}
	_, err := s.client.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{
		Bucket:  aws.String(s.opts.Bucket),
		Key:     aws.String(s.full(obj.Key)),
		Tagging: &types.Tagging{TagSet: tags},
	})
	return err
}

// Stat describes the object from HeadObject and its tags. When the tags are
// missing or do not match the stored size (a crash between the upload and
// the tagging, or an object written by something else) it hashes the stored
// bytes, and repairs the tags when it can: the SHA256 returned is always true
// of what is stored.
func (s *S3) Stat(ctx context.Context, key string) (vocab.Object, error) {
	if err := ValidKey(key); err != nil {
		return vocab.Object{}, err
	}
	full := s.full(key)
	h, err := s.head(ctx, full)
	if err != nil {
		return vocab.Object{}, s.notFoundOr(key, "stat", err)
	}
	obj := vocab.Object{Key: key, Size: aws.ToInt64(h.ContentLength), ContentType: aws.ToString(h.ContentType),
		ContentEncoding: aws.ToString(h.ContentEncoding)}
	if obj.ContentEncoding != string(CompressionGzip) && obj.ContentEncoding != string(CompressionZstd) {
		obj.ContentEncoding = "" // not ours to decode
	}
	t, err := s.client.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(full)})
	if err != nil {
		return vocab.Object{}, s.notFoundOr(key, "stat: tags", err)
	}
	tags := map[string]string{}
	for _, tg := range t.TagSet {
		tags[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
	}
	size, _ := strconv.ParseInt(tags[tagSize], 10, 64)
	origSize, _ := strconv.ParseInt(tags[tagOriginalSize], 10, 64)
	if tags[tagSHA256] != "" && size == obj.Size && (obj.ContentEncoding == "" || tags[tagOriginalSHA256] != "") {
		obj.SHA256 = tags[tagSHA256]
		if obj.ContentEncoding != "" {
			obj.OriginalSHA256, obj.OriginalSize = tags[tagOriginalSHA256], origSize
		}
		return obj, nil
	}
	if err := s.hashStored(ctx, &obj); err != nil {
		return vocab.Object{}, err
	}
	_ = s.writeTags(ctx, obj) // best effort: the next Stat hashes again if it failed
	return obj, nil
}

// hashStored fills obj's hashes by reading the stored object (and decoding
// it, when it carries an encoding).
func (s *S3) hashStored(ctx context.Context, obj *vocab.Object) error {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(s.full(obj.Key))})
	if err != nil {
		return s.notFoundOr(obj.Key, "stat: hash", err)
	}
	defer out.Body.Close()
	stored := newCounter()
	body := io.TeeReader(out.Body, stored)
	if obj.ContentEncoding == "" {
		_, err = io.Copy(io.Discard, body)
	} else {
		var d io.ReadCloser
		if d, err = decoder(io.NopCloser(body), obj.ContentEncoding); err == nil {
			orig := newCounter()
			_, err = io.Copy(orig, d)
			d.Close()
			obj.OriginalSHA256, obj.OriginalSize = orig.sum(), orig.n
		}
		if err == nil { // the decoder may stop before the end of the stream
			_, err = io.Copy(io.Discard, body)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: stat %s: hash: %w", s.where(), obj.Key, err)
	}
	obj.SHA256, obj.Size = stored.sum(), stored.n
	return nil
}
