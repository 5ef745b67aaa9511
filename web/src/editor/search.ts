// Palette and quick-add search: a node type matches when every word typed is found in its
// title, type name, category or description, directly or through an alias ("tts" is
// TextToSpeech, "img" is the image category, "wait" is Delay). Pure, so it is unit-tested.
import type { NodeType } from "../api/types";

/** A word people type → what it stands for (a type name, a category or another word). */
export const ALIASES: Readonly<Record<string, readonly string[]>> = {
  // categories
  img: ["image"],
  pic: ["image"],
  picture: ["image"],
  photo: ["image"],
  png: ["image"],
  jpg: ["image"],
  vid: ["video"],
  movie: ["video"],
  film: ["video"],
  clip: ["video"],
  mp4: ["video"],
  sound: ["audio"],
  music: ["audio"],
  mp3: ["audio"],
  wav: ["audio"],
  string: ["text"],
  // single types
  tts: ["TextToSpeech"],
  speech: ["TextToSpeech"],
  voice: ["TextToSpeech"],
  speak: ["TextToSpeech"],
  say: ["TextToSpeech"],
  narrate: ["TextToSpeech"],
  narration: ["TextToSpeech"],
  llm: ["LLMText"],
  gpt: ["LLMText"],
  chat: ["LLMText"],
  ai: ["LLMText", "TextToImage"],
  summarize: ["LLMText"],
  generate: ["LLMText", "TextToImage"],
  dalle: ["TextToImage"],
  diffusion: ["TextToImage"],
  wait: ["Delay"],
  sleep: ["Delay"],
  pause: ["Delay"],
  timer: ["Delay"],
  resize: ["ImageResize", "ImageThumbnail"],
  scale: ["ImageResize", "ImageThumbnail"],
  shrink: ["ImageResize", "ImageThumbnail"],
  thumb: ["ImageThumbnail"],
  rotate: ["ImageRotate"],
  cut: ["ImageCrop", "AudioTrim"],
  trim: ["AudioTrim"],
  blur: ["ImageFilter"],
  filter: ["ImageFilter"],
  caption: ["ImageCaption", "VideoCaption"],
  subtitle: ["VideoCaption"],
  title: ["RenderText", "ImageCaption", "VideoCaption"],
  join: ["TextJoin", "AudioConcat", "VideoConcat"],
  concat: ["TextJoin", "AudioConcat", "VideoConcat"],
  merge: ["TextJoin", "AudioConcat", "VideoConcat", "VideoAddAudio"],
  combine: ["TextJoin", "AudioConcat", "VideoConcat", "ImageAudioToVideo"],
  http: ["HttpRequest"],
  fetch: ["HttpRequest"],
  api: ["HttpRequest"],
  url: ["HttpRequest"],
  web: ["HttpRequest"],
  download: ["HttpRequest"],
  json: ["JsonExtract"],
  template: ["TextTemplate"],
  jinja: ["TextTemplate"],
  input: ["TextInput"],
  prompt: ["TextInput", "LLMText"],
  split: ["TextSplit"],
  count: ["WordCount"],
  words: ["WordCount"],
  tone: ["ToneGenerator"],
  beep: ["ToneGenerator"],
  silence: ["ToneGenerator"],
  volume: ["AudioVolume"],
  soundtrack: ["VideoSound"],
  extract: ["VideoSound"],
  fade: ["AudioVolume"],
  gradient: ["GradientBackground"],
  background: ["GradientBackground"],
  zoom: ["KenBurns"],
  pan: ["KenBurns"],
  slides: ["Slideshow"],
  grid: ["ImageGrid"],
  collage: ["ImageGrid"],
};

function haystack(t: NodeType): string {
  return `${t.title} ${t.type} ${t.category} ${t.description}`.toLowerCase();
}

/** How well one typed word fits a type: 0 = not at all, higher = better. */
function wordScore(t: NodeType, word: string): number {
  const title = t.title.toLowerCase();
  const type = t.type.toLowerCase();
  let best = 0;
  if (title.startsWith(word) || type.startsWith(word)) best = 5;
  else if (title.includes(word) || type.includes(word)) best = 4;
  else if (t.category.toLowerCase() === word) best = 3;
  else if (haystack(t).includes(word)) best = 1;
  for (const [alias, meanings] of Object.entries(ALIASES)) {
    if (!alias.startsWith(word) || (alias !== word && word.length < 2)) continue;
    const exact = alias === word;
    for (const meaning of meanings) {
      const m = meaning.toLowerCase();
      if (m === type) best = Math.max(best, exact ? 6 : 4);
      else if (m === t.category.toLowerCase()) best = Math.max(best, exact ? 3 : 2);
    }
  }
  return best;
}

/** The types matching `query`, best first (ties keep catalog order); all of them for "". */
export function searchNodeTypes(types: readonly NodeType[], query: string): NodeType[] {
  const words = query.trim().toLowerCase().split(/\s+/).filter(Boolean);
  if (words.length === 0) return [...types];
  const scored: { t: NodeType; score: number; index: number }[] = [];
  types.forEach((t, index) => {
    let score = 0;
    for (const word of words) {
      const s = wordScore(t, word);
      if (s === 0) return;
      score += s;
    }
    scored.push({ t, score, index });
  });
  scored.sort((a, b) => b.score - a.score || a.index - b.index);
  return scored.map((s) => s.t);
}
