"""Sentences for `bad_takes.py`: varied English and Mandarin lines (short to long, questions, lists, numbers
spelled out). Even-numbered lines derive the bands (`--measure`), odd-numbered ones measure false positives."""

from __future__ import annotations

EN = (
    "Good morning.",
    "Where did you put the keys?",
    "The quick brown fox jumps over the lazy dog.",
    "Please close the window before you leave the house tonight.",
    "I think we should wait until the rain stops.",
    "She sells sea shells by the sea shore.",
    "Thank you very much for coming all this way to see us.",
    "The train to the city leaves at seven in the morning, so do not be late.",
    "Honestly, I have no idea what he meant by that.",
    "Bring apples, bread, cheese, and a bottle of water.",
    "After the long winter, the first warm day felt like a gift.",
    "Could you tell me how to get to the library?",
    "Our results show a small but steady improvement over the last three years.",
    "Wait!",
    "The old lighthouse keeper climbed the stairs every evening to light the lamp.",
    "It was the best of times, it was the worst of times.",
    "We measured the temperature twice a day for two weeks.",
    "Nobody expected the meeting to last until midnight.",
    "Turn left at the second corner and walk straight ahead.",
    "Music has a way of bringing people together.",
    "He opened the letter slowly, afraid of what it might say.",
    "Remember to water the plants while I am away.",
    "The museum is closed on Mondays and public holidays.",
    "A small boat drifted quietly across the silver lake.",
    "Learning a new language takes patience and a lot of practice.",
    "Yes, of course.",
    "The children laughed as the puppy chased its own tail around the garden.",
    "Send me the report by Friday afternoon, please.",
    "Every great journey begins with a single step.",
    "The storm knocked out the power for most of the night.",
    "I would like a cup of tea with a little milk.",
    "Scientists have discovered a new species of frog in the mountain forests.",
)

ZH = (
    "早上好。",
    "你把钥匙放在哪里了？",
    "今天天气很好，我们去公园散步吧。",
    "请在离开之前把窗户关上。",
    "我觉得我们应该等雨停了再走。",
    "谢谢你大老远来看我们。",
    "去市区的火车早上七点出发，千万别迟到。",
    "说实话，我不明白他是什么意思。",
    "带上苹果、面包、奶酪和一瓶水。",
    "漫长的冬天过去以后，第一个温暖的日子就像一份礼物。",
    "请问去图书馆怎么走？",
    "我们的结果显示，过去三年有小而稳定的进步。",
    "等一下！",
    "老灯塔看守人每天傍晚爬上楼梯去点灯。",
    "我们连续两个星期每天测量两次温度。",
    "没有人想到这个会议会开到半夜。",
    "在第二个路口左转，然后一直往前走。",
    "音乐总能把人们聚在一起。",
    "他慢慢地打开信，害怕里面写着什么。",
    "我不在的时候记得给花浇水。",
    "博物馆星期一和节假日闭馆。",
    "一条小船静静地漂过银色的湖面。",
    "学习一门新语言需要耐心和大量的练习。",
    "好的，没问题。",
    "孩子们笑着看小狗在花园里追自己的尾巴。",
    "请在星期五下午之前把报告发给我。",
    "千里之行，始于足下。",
    "暴风雨让大部分地区整夜停电。",
    "我想要一杯加一点牛奶的茶。",
    "科学家在山区森林里发现了一种新的青蛙。",
    "春天来了，河边的柳树都发芽了。",
    "这本书我已经看了三遍，每次都有新的感受。",
)

CORPUS = {"en": EN, "zh": ZH}


def measure_lines(language: str) -> tuple[str, ...]:
    return CORPUS[language][0::2]


def eval_lines(language: str) -> tuple[str, ...]:
    """The held-out lines, plus two-sentence paragraphs made of them (the offline voice joins sentences)."""
    held = CORPUS[language][1::2]
    joiner = " " if language == "en" else ""
    pairs = tuple(joiner.join(held[i:i + 2]) for i in range(0, len(held) - 1, 4))
    return held + pairs
